"""A pinned guest that stock nova-compute placed keeps its CPUs when
rtagent takes over the host's accounting.

nova's libvirt functional harness (fake libvirt host of 2 cells x 4 CPUs,
all in ``cpu_dedicated_set``; real API, scheduler and Placement). Two
pinned guests are booted on stock nova (nova spreads them over the two
cells) and the first deleted, so the one left runs on cell 1. An agent
choosing a pinning itself would put it on the empty cell 0; claimed with
the CPUs of its ``numa_topology`` (RPC ``running_cpus``), it keeps cell 1's.

Run by ``make test-nova`` in .venv-nova.
"""

from nova import context as nova_context
from nova import objects
from nova.tests.fixtures import libvirt as fakelibvirt
from nova.tests.functional.libvirt import base

from tests.nova.harness import KeepsTestMethod, PatientWaits, take_over


class PinnedAdoption(KeepsTestMethod, PatientWaits, base.ServersTestBase):
    ADDITIONAL_FILTERS = ["NUMATopologyFilter"]

    def test_a_pinned_guest_keeps_its_cpus(self):
        self.flags(cpu_dedicated_set="0-7", cpu_shared_set=None, group="compute")
        self.flags(vcpu_pin_set=None)
        host_info = fakelibvirt.HostInfo(cpu_nodes=2, cpu_sockets=1, cpu_cores=2, cpu_threads=2)
        self.start_compute(host_info=host_info, hostname="compute1")
        flavor = self._create_flavor(vcpu=2, extra_spec={"hw:cpu_policy": "dedicated"})
        first = self._create_server(flavor_id=flavor)
        kept = self._create_server(flavor_id=flavor)
        self._delete_server(first)
        ctx = nova_context.get_admin_context()
        running = objects.Instance.get_by_uuid(ctx, kept["id"]).numa_topology.cpu_pinning
        self.assertEqual(2, len(running))
        self.assertTrue(running <= {4, 5, 6, 7}, running)  # cell 1

        # rtagent takes over: the compute service restarts on it.
        fixture = take_over(self, "compute1")

        node = self.compute_rp_uuids["compute1"]
        record = fixture.link("compute1").call(
            "get_instance", node_uuid=node, instance_uuid=kept["id"]
        )
        claimed = {cpu for cell in record["claim"]["numa"] for cpu in cell["pinning"].values()}
        self.assertEqual(running, claimed)
        # nova's record is left as it was.
        again = objects.Instance.get_by_uuid(ctx, kept["id"]).numa_topology.cpu_pinning
        self.assertEqual(running, again)
        # A new pinned guest gets the free cell, not the kept guest's CPUs.
        new = self._create_server(flavor_id=flavor)
        placed = objects.Instance.get_by_uuid(ctx, new["id"]).numa_topology.cpu_pinning
        self.assertFalse(placed & running, placed)
