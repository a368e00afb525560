"""COMPUTE_REMOTE_MANAGED_PORTS on the root: a driver that can bind
remote-managed ports (a SmartNIC's VFs) has it only while the node tracks
remote-managed PCI devices, as nova's tracker grants it."""

import pytest

from rtagent.conf.pci import PciConfig
from rtagent.pci import spec
from rtagent.placement.desired import root_provider
from tests.unit.helpers import make_tracker
from tests.unit.test_pci_claims import HOST

TRAIT = "COMPUTE_REMOTE_MANAGED_PORTS"
VFS = '{"vendor_id": "8086", "product_id": "154c"'


@pytest.mark.parametrize(
    ("specs", "driver_traits", "granted"),
    [
        ([VFS + ', "remote_managed": "true"}'], {TRAIT}, True),
        ([VFS + ', "remote_managed": "false"}'], {TRAIT}, False),
        ([VFS + "}"], {TRAIT}, False),
        ([], {TRAIT}, False),
        # a driver that cannot bind them never has it
        ([VFS + ', "remote_managed": "true"}'], set(), False),
    ],
)
def test_granted_only_with_remote_managed_devices(tmp_path, specs, driver_traits, granted):
    tracker, store = make_tracker(
        tmp_path, pci=PciConfig(device_specs=spec.parse_device_specs(specs))
    )
    try:
        tracker.update_host(HOST)
        root = root_provider(tracker.snapshot(), driver_traits, managed_traits={TRAIT})
    finally:
        store.close()
    assert (TRAIT in root.traits) is granted
    assert TRAIT in root.managed_traits  # removed when no longer granted
