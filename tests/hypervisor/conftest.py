"""make test-hypervisor's fixtures: the test cloud's control plane with
same-host resizes allowed (every nova service must allow them), and the
step lines printed when the run ends, the summary last."""

import time

import pytest

from tests.cloud.session import attach_tails, end_on_sigterm, missing
from tests.requirements import require

# ``hypervisor_step=NAME agree=yes|no`` per step, in order.
STEPS = []
_FIGURES = []
_STARTED = time.monotonic()


def _libvirtd_missing():
    from rtagent.testing.libvirtd import missing_requirements

    return missing_requirements()


def pytest_configure(config):
    end_on_sigterm()


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
    attach_tails(item, outcome.get_result(), holders=("scenario",))


@pytest.fixture(scope="session")
def figures():
    return _FIGURES


@pytest.fixture(scope="session")
def steps():
    return STEPS


@pytest.fixture(scope="session")
def control(tmp_path_factory, figures):
    require(missing("test-hypervisor", _libvirtd_missing), "real hypervisor")
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
