"""The test cloud's fixtures: one control plane for the session, the hosts
per test (or per scenario); step figures printed at the end of the run,
every service's last log lines printed with a failure."""

import time

import pytest

from tests.cloud.session import attach_tails, end_on_sigterm, missing
from tests.requirements import require

_FIGURES = []
_STARTED = time.monotonic()


def pytest_configure(config):
    end_on_sigterm()


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("test cloud figures")
        for line in _FIGURES:
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"cloud: total_s={time.monotonic() - _STARTED:.1f}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    attach_tails(item, outcome.get_result())


@pytest.fixture(scope="session")
def figures():
    return _FIGURES


@pytest.fixture(scope="session")
def control(tmp_path_factory, figures):
    """The control plane, started once for the session."""
    require(missing("test-cloud"), "test cloud")
    from tests.cloud.control import ControlPlane

    t0 = time.monotonic()
    plane = ControlPlane(str(tmp_path_factory.mktemp("cloud")))
    try:
        plane.start()
        figures.append(
            "cloud: step=control_plane "
            + " ".join(f"{k}={v:.1f}" for k, v in plane.figures.items())
            + f" total_s={time.monotonic() - t0:.1f} logs={plane.logdir}"
        )
        yield plane
    finally:
        stop_t0 = time.monotonic()
        plane.stop()
        figures.append(f"cloud: step=control_plane_stop stop_s={time.monotonic() - stop_t0:.1f}")


@pytest.fixture(scope="session")
def flavors(control):
    """Two flavors: small (1 vCPU, 256 MB, 1 GB) and large (2, 512, 1); one
    disk size, as nova refuses a resize below the disk a server booted with."""
    from tests.cloud.api import Nova
    from tests.cloud.checks import Flavor

    nova = Nova(control.api_endpoint, lambda: control.services)
    made = {}
    for name, vcpus, ram, disk in (("small", 1, 256, 1), ("large", 2, 512, 1)):
        made[name] = Flavor(name, vcpus, ram, disk, nova.create_flavor(name, vcpus, ram, disk))
    return made
