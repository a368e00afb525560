"""The node-device XML cache, and discovery where libvirt has no node devices.

The functional tests (``tests/functional/test_pci_discovery.py``) cover the
reading against the test driver; these cover what it cannot produce: an
event racing a read, and a daemon without the node-device driver.
"""

import pathlib

import libvirt
import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt import facts
from tests.unit.virt.test_libvirt_driver_unit import STEADY, FakeConn, lv_error, make_driver

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "libvirt"
VIRTIO_NET = (FIXTURES / "nodedev-virtio-net-1af4-1041.xml").read_text()


class FakeNodeDevice:
    def __init__(self, conn, name, xml, error=None):
        self._conn, self._name, self._xml, self.error = conn, name, xml, error

    def name(self):
        return self._name

    def XMLDesc(self, flags):
        self._conn.calls.append(f"XMLDesc {self._name}")
        if self.error is not None:
            raise self.error
        return self._xml


class DevicesConn(FakeConn):
    """A FakeConn whose host has node devices."""

    def __init__(self, devices=(), **kw):
        super().__init__(**kw)
        self.devices = [FakeNodeDevice(self, name, xml) for name, xml in devices]

    def listAllDevices(self, flags):
        assert flags == facts.NODE_DEVICE_FLAGS
        return self._answer("listAllDevices", list(self.devices))


def test_kept_until_forgotten_or_no_longer_listed():
    cache = facts.NodeDeviceCache()
    cache.keep("pci_a", "<a/>", cache.epoch)
    cache.keep("pci_b", "<b/>", cache.epoch)
    cache.forget("pci_a")  # a node-device event
    assert (cache.get("pci_a"), cache.get("pci_b")) == (None, "<b/>")
    cache.prune({"pci_c": "<c/>"})  # pci_b is no longer listed
    assert len(cache) == 0


def test_an_xml_read_across_an_event_is_not_kept():
    # The reading notes the epoch, reads the XML; the event (another
    # thread) arrives before the reading stores it: that XML may be the old
    # card's, so it serves this reading only and the next one reads again.
    cache = facts.NodeDeviceCache()
    epoch = cache.epoch
    cache.forget("pci_a")
    cache.keep("pci_a", "<old/>", epoch)
    assert cache.get("pci_a") is None
    cache.keep("pci_a", "<new/>", cache.epoch)
    assert cache.get("pci_a") == "<new/>"


def test_forgetting_an_unknown_name_is_harmless():
    cache = facts.NodeDeviceCache()
    cache.forget("scsi_host12")
    assert len(cache) == 0


def test_no_node_device_driver_means_no_pci_devices_not_a_failed_audit():
    conn = FakeConn(fail={"listAllDevices": lv_error(libvirt.VIR_ERR_NO_SUPPORT)})
    driver, _ = make_driver(conn)
    assert driver.read_host().pci_devices == ()
    assert driver.read_host().pci_devices == ()
    # Still one call a reading (and the isAlive that classified the error).
    assert driver.last_call_count == STEADY + 1
    assert conn.calls.count("listAllDevices") == 2


def test_other_errors_fail_the_reading_and_keep_the_connection():
    conn = DevicesConn([("pci_0000_00_03_0", VIRTIO_NET)])
    driver, opener = make_driver(conn)
    conn.devices[0].error = lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, "oops")
    with pytest.raises(errors.HostReadError) as info:
        driver.read_host()
    assert "XML of node device pci_0000_00_03_0" in str(info.value)
    conn.devices[0].error = None
    conn.fail["listAllDevices"] = lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, "busy")
    with pytest.raises(errors.HostReadError) as info:
        driver.read_host()
    assert "node devices" in str(info.value)
    del conn.fail["listAllDevices"]
    assert [d.address for d in driver.read_host().pci_devices] == ["0000:00:03.0"]
    assert not conn.closed
    assert len(opener.uris) == 1


def test_a_lost_connection_while_reading_device_xml_is_unavailability():
    conn = DevicesConn([("pci_0000_00_03_0", VIRTIO_NET)])
    conn.devices[0].error = lv_error(libvirt.VIR_ERR_SYSTEM_ERROR, "Broken pipe")
    driver, _ = make_driver(conn, DevicesConn([("pci_0000_00_03_0", VIRTIO_NET)]))
    with pytest.raises(errors.HypervisorUnavailable):
        driver.read_host()
    assert conn.closed
    assert len(driver.read_host().pci_devices) == 1


def test_a_new_connection_reads_every_device_again():
    # A reconnection may be a new daemon (an upgrade, a restart while a
    # card was swapped): nothing read through the old one is trusted.
    first = DevicesConn([("pci_0000_00_03_0", VIRTIO_NET)])
    second = DevicesConn([("pci_0000_00_03_0", VIRTIO_NET)])
    driver, _ = make_driver(first, second)
    driver.read_host()
    driver.read_host()
    assert first.calls.count("XMLDesc pci_0000_00_03_0") == 1
    driver.close()
    driver.read_host()
    assert second.calls.count("XMLDesc pci_0000_00_03_0") == 1
