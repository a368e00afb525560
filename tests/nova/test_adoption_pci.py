"""A guest that stock nova-compute gave a PCI device keeps that device when
rtagent takes over the host's accounting.

nova's libvirt functional harness with two PCI devices of one alias
(0000:81:00.0 and 0000:81:01.0; real API, scheduler and Placement). Two
guests with one device each are booted on stock nova, and the first deleted,
so the one left holds 81:01.0. An agent choosing a device itself would give
it the free 81:00.0; claimed with the devices nova's rows give it (RPC
``running_devices``), it keeps 81:01.0, and the next guest gets the other.

Run by ``make test-nova`` in .venv-nova.
"""

from nova import context as nova_context
from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import test_pci_sriov_servers
from oslo_serialization import jsonutils

from tests.nova.harness import KeepsTestMethod, PatientWaits, take_over

ALIAS = "a1"
DEVICE = {"vendor_id": fakelibvirt.PCI_VEND_ID, "product_id": fakelibvirt.PCI_PROD_ID}


def devices_of(ctx, instance_uuid):
    return sorted(d.address for d in objects.Instance.get_by_uuid(ctx, instance_uuid).pci_devices)


class PciAdoption(KeepsTestMethod, PatientWaits, test_pci_sriov_servers._PCIServersTestBase):
    ADMIN_API = True
    microversion = "latest"
    PCI_DEVICE_SPEC = [jsonutils.dumps(DEVICE)]
    PCI_ALIAS = [jsonutils.dumps({**DEVICE, "name": ALIAS})]

    def test_a_guest_keeps_the_device_it_runs_with(self):
        self.start_compute(pci_info=fakelibvirt.HostPCIDevicesInfo(num_pci=2))
        flavor = self._create_flavor(extra_spec={"pci_passthrough:alias": f"{ALIAS}:1"})
        first = self._create_server(flavor_id=flavor, networks="none")
        kept = self._create_server(flavor_id=flavor, networks="none")
        ctx = nova_context.get_admin_context()
        self.assertEqual(["0000:81:00.0"], devices_of(ctx, first["id"]))
        self.assertEqual(["0000:81:01.0"], devices_of(ctx, kept["id"]))
        self._delete_server(first)

        # rtagent takes over: the compute service restarts on it.
        fixture = take_over(self, "compute1")

        node = self.compute_rp_uuids["compute1"]
        record = fixture.link("compute1").call(
            "get_instance", node_uuid=node, instance_uuid=kept["id"]
        )
        claimed = sorted(d["address"] for d in record["claim"]["pci_devices"])
        self.assertEqual(["0000:81:01.0"], claimed)
        # nova's rows say the same, and the other device is free.
        self.assertEqual(["0000:81:01.0"], devices_of(ctx, kept["id"]))
        self.assertPCIDeviceCounts("compute1", total=2, free=1)
        # The next guest gets the device the adopted one does not run with.
        new = self._create_server(flavor_id=flavor, networks="none")
        self.assertEqual(["0000:81:00.0"], devices_of(ctx, new["id"]))
        self.assertPCIDeviceCounts("compute1", total=2, free=0)
