"""nova's operations while the rtagent daemon is away, in nova's own harness
over RPC (issue 47).

Stock nova's tracker is local: its calls cannot time out. rtagent's are
calls to a daemon, which may be down (restarting, killed, cut off from the
broker). A delete must complete then, as on stock nova: the server gone,
its allocation deleted, and the daemon settling its claim when it is back.
Before issue 47 the delete timed out in ``update_usage`` and left the
server in ERROR with its allocation kept.

Run by ``make test-nova`` in .venv-nova.
"""

from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

# Seconds a call waits for the absent daemon before it gives up.
AWAY_TIMEOUT_S = 3


class DaemonAwayOverRpc(
    KeepsTestMethod, PatientWaits, integrated_helpers.ProviderUsageBaseTestCase
):
    compute_driver = "fake.MediumFakeDriver"

    def setUp(self):
        super().setUp()
        self.rtagent = self.useFixture(RtagentTrackerFixture("rpc"))
        placement_started(self.placement.fixture.endpoint)
        self.compute1 = self._start_compute(host="host1")
        self.flavor = self.api.get_flavors()[0]
        self.node = self._get_provider_uuid_by_host("host1")

    def _held_by_the_agent(self):
        # Read in process: the daemon's own state, which RPC cannot reach
        # while it is away.
        local = self.rtagent.link("host1").local
        return set(local.call("get_status", node_uuid=self.node)["instance_uuids"])

    def test_a_delete_completes_and_the_claim_is_settled_when_the_daemon_is_back(self):
        server = self._boot_and_check_allocations(self.flavor, "host1")
        link = self.rtagent.link("host1")
        link.stop_serving(call_timeout=AWAY_TIMEOUT_S)

        # nova's helper: the server is gone, its allocation deleted and the
        # provider's usage back to zero.
        self._delete_and_check_allocations(server)
        self.assertIn(server["id"], self._held_by_the_agent(), "the daemon was reached")

        link.serve_again()
        self._run_periodics()
        self.assertNotIn(server["id"], self._held_by_the_agent())
        status = link.call("get_status", node_uuid=self.node)
        self.assertEqual([], status["instance_uuids"])
        self.assertRequestMatchesUsage({"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, self.node)
