"""A 2-socket host with huge pages, read by rtagent's real libvirt driver.

The libvirt test driver cannot model NUMA cells, CPU siblings or huge pages
from a file, so its connection is put behind a proxy that answers the three
host facts a 2-socket host reports (capabilities, CPU map, node info) from
``tests/fixtures/libvirt/x86_64-2socket-hugepages-capabilities.xml``; every
other call (domains, hostname, versions) goes to the real test driver.
"""

import pathlib
import tempfile

import libvirt

from rtagent.virt.libvirt.driver import LibvirtDriver

FIXTURE = (
    pathlib.Path(__file__).resolve().parents[1]
    / "fixtures"
    / "libvirt"
    / "x86_64-2socket-hugepages-capabilities.xml"
)
CAPABILITIES = FIXTURE.read_text()
# Per cell: cores n and n+16. Dedicated: 6 cores per cell; shared: 2.
DEDICATED = "2-7,18-23,10-15,26-31"
SHARED = "0,1,16,17,8,9,24,25"


class TwoSocketConnection:
    """The test driver's connection with a 2-socket host's facts."""

    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def getCapabilities(self):
        return CAPABILITIES

    def getCPUMap(self, flags=0):
        return (32, [True] * 32, 32)

    def getInfo(self):
        # arch, MiB, CPUs, MHz, NUMA nodes, sockets per node, cores, threads
        return ["x86_64", 131072, 32, 2300, 2, 1, 8, 2]


def two_socket_driver(
    instances, uri="test:///default", dedicated=DEDICATED, shared=SHARED, **options
):
    """rtagent's libvirt driver on the test driver at ``uri``, given the
    2-socket host's facts."""
    return LibvirtDriver(
        uri,
        instances,
        opener=lambda opened: TwoSocketConnection(libvirt.open(opened)),
        cpu_dedicated_set=dedicated,
        cpu_shared_set=shared,
        **options,
    )


def read_host(dedicated=DEDICATED, shared=SHARED, reserved_huge_pages=()):
    """One reading of the 2-socket host through the real driver."""
    with tempfile.TemporaryDirectory() as instances:
        driver = two_socket_driver(
            instances,
            dedicated=dedicated,
            shared=shared,
            reserved_huge_pages=reserved_huge_pages,
        )
        try:
            return driver.read_host()
        finally:
            driver.close()
