"""make test-hypervisor's fixtures: the test cloud's control plane with
same-host resizes allowed (every nova service must allow them), and the
step lines printed when the run ends, the summary last."""

import os
import shutil
import signal
import time

import pytest

from tests.requirements import require

# ``hypervisor_step=NAME agree=yes|no`` per step, in order.
STEPS = []
_FIGURES = []
_STARTED = time.monotonic()


def _missing():
    try:
        import nova  # noqa: F401
    except ImportError:
        return "nova is not installed here (make test-hypervisor runs these in .venv-nova)"
    from rtagent.testing.libvirtd import missing_requirements as libvirtd_missing
    from rtagent.testing.postgres import missing_requirements as postgres_missing
    from rtagent.testing.rabbitmq import missing_requirements as rabbit_missing

    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if os.geteuid() != 0:
        return "must run as root (UTS namespaces, libvirtd's QEMU driver, PostgreSQL)"
    return rabbit_missing() or postgres_missing() or libvirtd_missing()


def pytest_configure(config):
    # A SIGTERM (a CI timeout) ends the run as Ctrl-C does: the fixtures'
    # finalizers stop every process (and guest) by its PID.
    signal.signal(signal.SIGTERM, signal.default_int_handler)


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("hypervisor figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)


def pytest_unconfigure(config):
    # After pytest's own summary: the step lines and the summary line last.
    if not STEPS:
        return
    from tests.hypervisor.kvmhost import virt_type

    for name, agreed in STEPS:
        print(f"hypervisor_step={name} agree={'yes' if agreed else 'no'}")
    print(
        f"hypervisor_steps={len(STEPS)} hypervisor_agree={sum(a for _, a in STEPS)} "
        f"virt_type={virt_type()} total_s={time.monotonic() - _STARTED:.0f}",
        flush=True,
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" or not report.failed:
        return
    holder = item.funcargs.get("scenario") if hasattr(item, "funcargs") else None
    cloud = getattr(holder, "cloud", None)
    if cloud is not None:
        text = "\n".join(f"--- {service}\n{tail}" for service, tail in cloud.tails())
        report.sections.append(("test cloud: last lines of every service's log", text))


@pytest.fixture(scope="session")
def figures():
    return _FIGURES


@pytest.fixture(scope="session")
def steps():
    return STEPS


@pytest.fixture(scope="session")
def control(tmp_path_factory, figures):
    require(_missing(), "real hypervisor")
    from tests.cloud.control import ControlPlane

    t0 = time.monotonic()
    plane = ControlPlane(
        str(tmp_path_factory.mktemp("hypervisor")),
        nova_options={"DEFAULT": {"allow_resize_to_same_host": "True"}},
    )
    try:
        plane.start()
        figures.append(f"hypervisor: step=control_plane total_s={time.monotonic() - t0:.1f}")
        yield plane
    finally:
        plane.stop()
