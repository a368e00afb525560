"""An evacuation the destination's agent refuses, in nova's own harness.

nova's ``test_evacuate_claim_on_dest_fails_*`` inject the refusal by
patching nova's fit test (``nova.compute.claims.MoveClaim``), which rtagent's
tracker does not use; they are listed as exceptions in docs/nova.md. Here
the same scenario with the refusal where rtagent makes it: the destination
agent's tracker refuses the move (``tracker.compute_resources_unavailable``,
as it does when a move does not fit), and the refusal travels the agent's
RPC endpoint, the link and the tracker adapter to nova's compute manager.
Everything nova's tests check must hold, and the agents must agree:
the destination holds nothing, the source keeps its claim.

Run by ``make test-nova`` in .venv-nova, in process and over RPC.
"""

from unittest import mock

from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from rtagent.tracker import errors
from tests.nova.harness import KeepsTestMethod, PatientWaits


class _RefusedEvacuation(KeepsTestMethod, PatientWaits):
    """The scenario; the classes below run it with each link."""

    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.rtagent = self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        self.compute1 = self._start_compute(host="host1")
        self.compute2 = self._start_compute(host="host2")
        self.flavor1 = self.api.get_flavors()[0]

    def _status(self, host):
        node = self._get_provider_uuid_by_host(host)
        return self.rtagent.link(host).call("get_status", node_uuid=node)

    def _evacuate_refused(self, keep_hypervisor_state):
        source_rp = self._get_provider_uuid_by_host("host1")
        dest_rp = self._get_provider_uuid_by_host("host2")
        server = self._boot_and_check_allocations(self.flavor1, "host1")
        source_service = self.admin_api.get_services(host="host1", binary="nova-compute")[0]
        self.compute1.stop()
        self.admin_api.put_service(source_service["id"], {"forced_down": "true"})

        dest_agent = self.rtagent.link("host2").agent
        dest_tracker = dest_agent.nodes.get(dest_rp)
        refused = []

        def refuse(*args, **kwargs):
            # The scheduler's allocation on the destination exists when the
            # agent is asked, as in nova's test.
            self.assertFlavorMatchesUsage(dest_rp, self.flavor1)
            refused.append(kwargs.get("instance_uuid"))
            raise errors.ComputeResourcesUnavailable(server["id"], ["injected by the test"])

        with mock.patch.object(dest_tracker, "start_move", side_effect=refuse):
            server = self._evacuate_server(
                server,
                expected_task_state=None,
                expected_migration_status="failed",
                expected_state="ACTIVE",
            )
        self.assertEqual(1, len(refused))

        self._run_periodics()
        self.assertFlavorMatchesUsage(source_rp, self.flavor1)
        self.assertRequestMatchesUsage({"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, dest_rp)
        self.assertFlavorMatchesAllocation(self.flavor1, server["id"], source_rp)
        dest = self._status("host2")
        self.assertEqual([], dest["instance_uuids"])
        self.assertEqual([], dest["moves"])

        self.compute1 = self.restart_compute_service(
            self.compute1, keep_hypervisor_state=keep_hypervisor_state
        )
        self.admin_api.put_service(source_service["id"], {"forced_down": "false"})
        self._run_periodics()
        self.assertFlavorMatchesUsage(source_rp, self.flavor1)
        self.assertFlavorMatchesAllocation(self.flavor1, server["id"], source_rp)
        source = self._status("host1")
        self.assertEqual([server["id"]], source["instance_uuids"])
        self.assertEqual([], source["moves"])
        self.assertEqual([], self._status("host2")["instance_uuids"])

    def test_refused_evacuation_keeps_the_instance_on_the_hypervisor(self):
        self._evacuate_refused(keep_hypervisor_state=True)

    def test_refused_evacuation_with_a_clean_hypervisor(self):
        self._evacuate_refused(keep_hypervisor_state=False)

    def test_an_error_that_is_no_refusal_fails_the_evacuation(self):
        # A malformed request (an adapter bug) is not "cannot take it": nova
        # must not treat it as a clean refusal.
        dest_rp = self._get_provider_uuid_by_host("host2")
        server = self._boot_and_check_allocations(self.flavor1, "host1")
        source_service = self.admin_api.get_services(host="host1", binary="nova-compute")[0]
        self.compute1.stop()
        self.admin_api.put_service(source_service["id"], {"forced_down": "true"})
        dest_tracker = self.rtagent.link("host2").agent.nodes.get(dest_rp)
        malformed = errors.InvalidClaimRequest(reason="injected by the test")
        with mock.patch.object(dest_tracker, "start_move", side_effect=malformed):
            self._evacuate_server(
                server, expected_state="ERROR", expected_migration_status="failed"
            )


class RefusedEvacuationInProcess(_RefusedEvacuation, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"


class RefusedEvacuationOverRpc(_RefusedEvacuation, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "rpc"
