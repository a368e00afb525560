"""PCI discovery on every audit, through the libvirt driver on libvirt's test
driver: what a HostView carries and what it costs.

The calls are counted by the driver's own :class:`CallObserver`, which names
every libvirt call it makes. A thin proxy over the real connection stands in
for hot-plug (it hides listed devices) and for a device removed between the
list and the read (it lists a real handle of a node device that is gone).
"""

import os
import pathlib
import time

import libvirt
import pytest

from rtagent.pci import model
from rtagent.virt.libvirt import LibvirtDriver
from rtagent.virt.libvirt import calls as calls_mod

pytestmark = pytest.mark.functional

HOST_XML = (
    pathlib.Path(__file__).resolve().parents[1]
    / "fixtures"
    / "libvirt"
    / "test-driver-sriov-host.xml"
)
SRIOV_URI = f"test://{HOST_XML}"
GIB = 2**30
LIST = "node devices"
XML_OF = "XML of node device "
PF, GPU = "0000:3b:00.0", "0000:af:00.0"
VFS = tuple(f"0000:3b:02.{fn}" for fn in range(4))
ROOT_PORT = "0000:3a:00.0"
# The PCI functions of the host file, and the net device naming the PF.
NODE_DEVICES = 8
# A steady audit's calls before PCI discovery came (not counting the reuse of
# the open connection, which is observed but is no call).
STEADY = [
    "node info",
    "CPU map",
    "hypervisor type",
    "hypervisor version",
    "hypervisor hostname",
    "domain states",
]
# A vHBA the test driver can create and destroy at run time (test:///default
# has the fc_host parent): a real node device that vanishes on demand.
VHBA = """<device><parent>scsi_host1</parent><capability type='scsi_host'>
<capability type='fc_host'><wwnn>2000000012341234</wwnn><wwpn>1000000012341234</wwpn>
</capability></capability></device>"""


def fixed_statvfs(_path):
    return os.statvfs_result((4096, 4096, 100 * GIB // 4096, 50 * GIB // 4096, 0, 0, 0, 0, 0, 255))


class Recorder(calls_mod.CallObserver):
    """Names the libvirt calls the driver makes, per audit."""

    def __init__(self):
        self.whats = []

    def before(self, what):
        self.whats.append(what)

    def take(self):
        whats, self.whats = self.whats, []
        return whats


def xml_reads(whats):
    return sorted(w[len(XML_OF) :] for w in whats if w.startswith(XML_OF))


class Listing:
    """The real connection, with ``listAllDevices`` edited: ``hidden`` names
    are left out (not plugged yet, or unplugged), ``extra`` handles added."""

    def __init__(self, conn):
        self._conn = conn
        self.hidden = set()
        self.extra = []

    def listAllDevices(self, flags):
        listed = [d for d in self._conn.listAllDevices(flags) if d.name() not in self.hidden]
        return listed + self.extra

    def __getattr__(self, name):
        return getattr(self._conn, name)


def make_driver(tmp_path, uri, **kw):
    recorder = Recorder()
    proxies = []

    def opener(opened_uri):
        proxies.append(Listing(libvirt.open(opened_uri)))
        return proxies[-1]

    driver = LibvirtDriver(
        uri, str(tmp_path), statvfs=fixed_statvfs, opener=opener, observer=recorder, **kw
    )
    return driver, recorder, proxies


@pytest.fixture
def sriov(tmp_path):
    driver, recorder, proxies = make_driver(tmp_path, SRIOV_URI)
    yield driver, recorder, proxies
    driver.close()


def test_host_view_carries_the_pf_its_vfs_and_the_gpu(sriov):
    driver, _, _ = sriov
    devices = driver.read_host().pci_devices

    assert [d.address for d in devices] == sorted([ROOT_PORT, PF, *VFS, GPU])
    by_address = {d.address: d for d in devices}
    pf = by_address[PF]
    assert (pf.vendor_id, pf.product_id, pf.dev_type) == ("8086", "1572", model.TYPE_PF)
    assert (pf.numa_node, pf.devname) == (0, "ens1f0")
    vfs = [by_address[a] for a in VFS]
    assert {(vf.dev_type, vf.parent_addr, vf.numa_node, vf.devname) for vf in vfs} == {
        (model.TYPE_VF, PF, 0, None)
    }
    gpu = by_address[GPU]
    assert (gpu.vendor_id, gpu.product_id, gpu.dev_type) == ("10de", "1eb8", model.TYPE_PCI)
    assert (gpu.numa_node, gpu.class_code) == (1, "030200")


def test_a_steady_audit_lists_once_and_reads_no_device_xml(sriov):
    driver, recorder, _ = sriov
    first = driver.read_host()
    whats = recorder.take()
    assert whats.count(LIST) == 1
    assert len(xml_reads(whats)) == NODE_DEVICES

    second = driver.read_host()
    whats = recorder.take()
    assert whats.count(LIST) == 1
    assert xml_reads(whats) == []
    # The same devices, and the same tuple: nothing was parsed again.
    assert second.pci_devices is first.pci_devices
    # The host file has no domains: a steady audit is the seven calls it
    # made before PCI discovery, and the list.
    assert whats == ["reuse connection", *STEADY, LIST]
    assert driver.last_call_count == len(STEADY) + 1


def test_hot_plug_and_removal_are_seen_at_the_next_audit(sriov):
    driver, recorder, proxies = sriov
    driver.read_host()  # opens the connection, so there is a proxy to edit
    listing = proxies[0]
    listing.hidden = {"pci_0000_af_00_0"}
    recorder.take()
    assert GPU not in {d.address for d in driver.read_host().pci_devices}
    assert xml_reads(recorder.take()) == []

    listing.hidden = set()  # plugged in: its XML is read, once
    assert GPU in {d.address for d in driver.read_host().pci_devices}
    assert xml_reads(recorder.take()) == ["pci_0000_af_00_0"]
    driver.read_host()
    assert xml_reads(recorder.take()) == []

    # Unplugging the PF takes its interface with it; the VFs stay listed
    # here (a real host removes them first) and keep naming their PF.
    listing.hidden = {"pci_0000_3b_00_0", "net_ens1f0_3c_fd_fe_a1_b2_c0"}
    devices = {d.address: d for d in driver.read_host().pci_devices}
    assert PF not in devices
    assert devices[VFS[0]].parent_addr == PF
    assert xml_reads(recorder.take()) == []

    listing.hidden = set()  # back: forgotten when it went, so read again
    devices = {d.address: d for d in driver.read_host().pci_devices}
    assert devices[PF].devname == "ens1f0"
    assert xml_reads(recorder.take()) == ["net_ens1f0_3c_fd_fe_a1_b2_c0", "pci_0000_3b_00_0"]


def test_a_host_without_node_devices_costs_one_list_call(tmp_path):
    driver, recorder, _ = make_driver(tmp_path, "test:///default")
    try:
        assert driver.read_host().pci_devices == ()
        whats = recorder.take()
        assert (whats.count(LIST), xml_reads(whats)) == (1, [])
        assert driver.read_host().pci_devices == ()
        whats = recorder.take()
        assert (whats.count(LIST), xml_reads(whats)) == (1, [])
        # The domain's info is kept while its state holds: no call for it.
        assert whats == ["reuse connection", *STEADY, LIST]
        assert driver.last_call_count == len(STEADY) + 1
    finally:
        driver.close()


def test_a_device_gone_between_list_and_read_is_skipped(tmp_path):
    driver, recorder, proxies = make_driver(tmp_path, "test:///default")
    try:
        driver.read_host()
        listing = proxies[0]
        gone = listing.nodeDeviceCreateXML(VHBA, 0)
        gone.destroy()
        listing.extra = [gone]  # listed, then read: VIR_ERR_NO_NODE_DEVICE
        recorder.take()

        assert driver.read_host().pci_devices == ()
        whats = recorder.take()
        assert xml_reads(whats) == [gone.name()]
        # libvirt's error made the driver check the connection, and keep it.
        assert "connection alive" in whats
        assert driver.connection_opens == 1

        listing.extra = []
        driver.read_host()
        assert xml_reads(recorder.take()) == []  # never kept
    finally:
        driver.close()


def test_node_device_events_reach_the_driver(tmp_path):
    # The test driver raises lifecycle events for the vHBAs it creates and
    # destroys; PCI devices cannot be hot-plugged into it, so this proves
    # the registration and the callback, not a PCI re-read.
    pulls = []
    driver = LibvirtDriver(
        "test:///default",
        str(tmp_path),
        statvfs=fixed_statvfs,
        events=True,
        on_change=lambda: pulls.append(1),
    )
    other = libvirt.open("test:///default")  # shared state: same driver
    try:
        driver.read_host()
        before = driver.events_received
        dev = other.nodeDeviceCreateXML(VHBA, 0)
        dev.destroy()
        _wait(lambda: driver.events_received >= before + 2)
        # A SCSI host changes no PCI inventory: no early audit for it.
        assert pulls == []
        assert driver.read_host().pci_devices == ()
    finally:
        other.close()
        driver.close()


def _wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting for libvirt events"
        time.sleep(0.02)
