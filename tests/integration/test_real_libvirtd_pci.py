"""PCI discovery against a real libvirtd (issue 16): every PCI function the
daemon lists is discovered, and none is claimable until a ``[pci]
device_spec`` matches it.

The devices are this machine's own (a VM's virtio functions, a host
bridge...), as libvirtd's node-device driver lists them; the claims are
made by a tracker over a real store, on a reading of the real driver.
"""

import json
import uuid
import xml.etree.ElementTree as ET

import libvirt
import pytest

from rtagent.conf.pci import PciConfig
from rtagent.pci import errors as pci_errors
from rtagent.pci import spec
from rtagent.tracker.model import Flavor
from rtagent.virt.libvirt import LibvirtDriver
from tests.unit.helpers import make_tracker

pytestmark = pytest.mark.integration


def listed(admin):
    """{address: (vendor, product)} of every PCI function libvirtd lists,
    read from its node-device XML by this test, not by the driver."""
    found = {}
    for dev in admin.listAllDevices(libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV):
        cap = ET.fromstring(dev.XMLDesc(0)).find("./capability[@type='pci']")
        address = "{:04x}:{:02x}:{:02x}.{:x}".format(
            *(int(cap.findtext(k), 0) for k in ("domain", "bus", "slot", "function"))
        )
        ids = (cap.find("vendor").get("id"), cap.find("product").get("id"))
        found[address] = tuple(i[2:].lower() for i in ids)
    return found


@pytest.fixture
def admin(libvirtd):
    """A connection of this test's own: the session's shared one does not
    survive the daemon restart another module makes."""
    conn = libvirt.open(libvirtd.uri)
    yield conn
    conn.close()


@pytest.fixture
def reading(libvirtd, tmp_path):
    driver = LibvirtDriver(libvirtd.uri, str(tmp_path))
    try:
        yield driver.read_host()
    finally:
        driver.close()


@pytest.fixture
def make(tmp_path):
    stores = []

    def tracker(specs=()):
        pci = PciConfig(device_specs=spec.parse_device_specs([json.dumps(s) for s in specs]))
        tracker, store = make_tracker(tmp_path / f"state{len(stores)}", pci=pci)
        stores.append(store)
        return tracker

    yield tracker
    for store in stores:
        store.close()


def ask(vendor, product):
    return [{"spec": [{"vendor_id": vendor, "product_id": product}], "count": 1}]


def test_every_listed_function_is_discovered(admin, reading):
    expected = listed(admin)
    assert expected, "libvirtd lists no PCI function on this machine"
    assert {d.address: (d.vendor_id, d.product_id) for d in reading.pci_devices} == expected


def test_none_is_claimable_without_a_matching_device_spec(admin, reading, make):
    tracker = make()
    snap = tracker.update_host(reading)
    assert list(snap.pci_devices) == []
    for vendor, product in sorted(set(listed(admin).values())):
        with pytest.raises(pci_errors.DevicesUnavailable):
            tracker.instance_claim(
                str(uuid.uuid4()), Flavor(1, 64), pci_requests=ask(vendor, product)
            )
    assert tracker.snapshot().instances == ()


def test_a_device_spec_makes_exactly_its_device_claimable(admin, reading, make):
    address, (vendor, product) = sorted(listed(admin).items())[-1]
    tracker = make([{"address": address}])
    snap = tracker.update_host(reading)
    assert [d.address for d in snap.pci_devices] == [address]
    claim = tracker.instance_claim(
        str(uuid.uuid4()), Flavor(1, 64), pci_requests=ask(vendor, product)
    )
    assert [h.address for h in claim.pci_devices] == [address]
    # Another function with the same ids is not the spec's: nothing is left.
    with pytest.raises(pci_errors.DevicesUnavailable):
        tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 64), pci_requests=ask(vendor, product))
