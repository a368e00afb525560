"""make test-cloud-faults' fixtures: one control plane (the test cloud's,
with :data:`~tests.faults.faulthosts.NOVA_OPTIONS`) for both trackers; the
per-fault lines and the summary printed when the run ends."""

import time

import pytest

from tests.cloud.session import attach_tails, end_on_sigterm, missing
from tests.requirements import require

# The ``fault=... tracker=...`` lines, in order; the evidence lines.
LINES = []
EVIDENCE = []
_FIGURES = []
_STARTED = time.monotonic()


def pytest_configure(config):
    end_on_sigterm()


def pytest_terminal_summary(terminalreporter):
    if _FIGURES or EVIDENCE:
        terminalreporter.section("faults: figures and evidence")
        for line in _FIGURES + EVIDENCE:
            terminalreporter.write_line(line)


def pytest_unconfigure(config):
    # After pytest's own summary: the fault lines and the summary last.
    if not LINES:
        return
    from tests.faults.verdict import summary

    for line in LINES:
        print(line.text())
    print(summary(LINES) + f" total_s={time.monotonic() - _STARTED:.0f}", flush=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    attach_tails(item, outcome.get_result(), holders=("run",))


@pytest.fixture(scope="session")
def figures():
    return _FIGURES


@pytest.fixture(scope="session")
def lines():
    return LINES


@pytest.fixture(scope="session")
def evidence():
    return EVIDENCE


@pytest.fixture(scope="session")
def control(tmp_path_factory, figures):
    require(missing("test-cloud-faults"), "test cloud")
    from tests.cloud.control import ControlPlane
    from tests.faults.faulthosts import NOVA_OPTIONS

    t0 = time.monotonic()
    plane = ControlPlane(str(tmp_path_factory.mktemp("faults")), nova_options=NOVA_OPTIONS)
    try:
        plane.start()
        figures.append(
            f"faults: step=control_plane total_s={time.monotonic() - t0:.1f} logs={plane.logdir}"
        )
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def flavors(control):
    from tests.cloud.api import Nova
    from tests.cloud.checks import Flavor

    nova = Nova(control.api_endpoint, lambda: control.services)
    made = {}
    for name, vcpus, ram, disk in (("small", 1, 256, 1), ("large", 2, 512, 1)):
        made[name] = Flavor(name, vcpus, ram, disk, nova.create_flavor(name, vcpus, ram, disk))
    return made
