"""A real libvirtd + QEMU, started and stopped by rtagent.testing.libvirtd.

Skipped where it cannot run (not root, packages missing) unless CI is set:
on CI (``CI=true``) a missing requirement fails the run instead, so these
tests cannot be skipped silently there.
"""

import libvirt
import pytest

from rtagent.testing import rabbitmq
from rtagent.testing.libvirtd import Libvirtd, missing_requirements
from rtagent.testing.placement_server import PlacementServer
from tests.requirements import require


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs a real libvirtd + QEMU (root)")


@pytest.fixture(scope="session")
def libvirtd():
    require(missing_requirements(), "real libvirtd")
    with Libvirtd() as daemon:
        yield daemon


@pytest.fixture(scope="module")
def broker():
    """A private RabbitMQ for the tests of one module."""
    require(rabbitmq.missing_requirements(), "RabbitMQ")
    with rabbitmq.RabbitMQ() as rabbit:
        yield rabbit


@pytest.fixture
def placement():
    """A Placement process of the test's own: each agent registers its host's
    name under its own UUID, and a provider name is unique in Placement."""
    with PlacementServer(db_sync=False) as server:
        yield server


@pytest.fixture(scope="session")
def admin(libvirtd):
    """A read-write connection for the test itself (making guests)."""
    conn = libvirt.open(libvirtd.uri)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def guests(libvirtd, admin):
    """Two tiny TCG guests, running for the whole session."""
    doms = [libvirtd.create_guest(admin, f"g{i}", memory_mib=64 + 32 * i) for i in range(2)]
    yield doms


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    # Only one real libvirtd can run on a machine (its QEMU driver's lock and
    # virtlogd's socket are fixed paths), so make test runs the tests that
    # use it apart, in one process (-m real_libvirtd), after the others ran
    # on several pytest-xdist workers (-m "not real_libvirtd"); another test
    # run on the machine waits its turn (rtagent.testing.libvirtd's machine
    # lock). First, so that the mark plugin's selection sees the mark.
    for item in items:
        if "libvirtd" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.real_libvirtd)
