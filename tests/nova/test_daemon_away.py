"""nova's operations while the rtagent daemon is away, in nova's own harness
over RPC (issue 47).

Stock nova's tracker is local: its calls cannot time out. rtagent's are
calls to a daemon, which may be down (restarting, killed, cut off from the
broker). A delete must complete then, as on stock nova: the server gone,
its allocation deleted, and the daemon settling its claim when it is back.
Before issue 47 the delete timed out in ``update_usage`` and left the
server in ERROR with its allocation kept.

A claim whose call goes unanswered (a broker restarted between the call
and its reply: RPC queues are not durable) is sent again, once: a retried
claim returns the same claim (issue 50, rabbitmq_restart_burst). Before,
the build failed on the first timeout and the server ended in ERROR.

Run by ``make test-nova`` in .venv-nova.
"""

import logging
import threading

from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

# Seconds a call waits for the absent daemon before it gives up.
AWAY_TIMEOUT_S = 3


class _Sent(logging.Handler):
    """Set once the link logs that it sends ``method`` (its DEBUG line,
    the one tests/faults waits for too)."""

    def __init__(self, method):
        super().__init__(logging.DEBUG)
        self.method = method
        self.sent = threading.Event()

    def emit(self, record):
        if record.getMessage().startswith(f"Calling {self.method} on the rtagent daemon"):
            self.sent.set()


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

    def test_a_claim_whose_call_went_unanswered_is_sent_again(self):
        link = self.rtagent.link("host1")
        link.stop_serving(call_timeout=AWAY_TIMEOUT_S)
        sent = _Sent("instance_claim")
        logger = logging.getLogger("rtagent.nova.link")
        level = logger.level
        logger.addHandler(sent)
        logger.setLevel(logging.DEBUG)
        self.addCleanup(logger.setLevel, level)
        self.addCleanup(logger.removeHandler, sent)

        def back_once_the_first_call_timed_out():
            # The daemon back after the claim's first call gave up and
            # before its resend does (it waits AWAY_TIMEOUT_S more).
            if sent.sent.wait(60):
                threading.Event().wait(AWAY_TIMEOUT_S * 1.5)
            link.serve_again()

        back = threading.Thread(target=back_once_the_first_call_timed_out, daemon=True)
        back.start()
        server = self._build_server(networks="none", flavor_id=self.flavor["id"])
        server = self.api.post_server({"server": server})
        server = self._wait_for_state_change(server, "ACTIVE")
        back.join(60)
        self.assertTrue(sent.sent.is_set(), "the claim was sent")

        self.assertIn(server["id"], self._held_by_the_agent())
        self.assertFlavorMatchesAllocation(self.flavor, server["id"], self.node)
        self._delete_and_check_allocations(server)
