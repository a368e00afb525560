"""No call to the agent while nova's ``compute_resources`` lock is held
(issue 51), and one agent call per claim.

rtagent's tracker takes nova's lock only for nova's rows
(``rtagent.nova.records``); were a call to the agent made under it, every
build on the host would wait for that round trip, and for the daemon's
timeout when it is away. Here every way to the agent (``call``, ``audit``,
``publish``, ``resync``, ``reread``) of a compute service's link is checked,
at the moment it is used, for nova's lock held by the calling thread, while
nova's API drives what ComputeManager does with its tracker: builds,
resizes confirmed and reverted, a live migration, a shelve offload and
unshelve, a delete, and the periodic.

The lock is nova's own: ``nova.utils.synchronized`` takes
``oslo_concurrency``'s fair lock ``compute_resources`` (its ``nova-``
prefix names lock files only), whose writer this test asks for. Run by
``make test-nova`` in .venv-nova, in process and over RPC.
"""

import threading

from nova.tests.functional import integrated_helpers
from oslo_concurrency import lockutils

from rtagent.nova.resource_tracker import COMPUTE_RESOURCE_SEMAPHORE
from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

NOVAS_LOCK = COMPUTE_RESOURCE_SEMAPHORE
WAYS = ("call", "audit", "publish", "resync", "reread")


class _LockWatch:
    """Wraps a link's ways to the agent: each use is counted, and those
    made with nova's lock held by the calling thread are kept."""

    def __init__(self):
        self.uses = []  # (way, method)
        self.under_lock = []
        self._mutex = threading.Lock()

    def wrap(self, link):
        for way in WAYS:
            setattr(link, way, self._checked(way, getattr(link, way)))

    def _checked(self, way, real):
        def checked(*args, **kwargs):
            method = args[0] if way == "call" else None
            held = lockutils.internal_fair_lock(NOVAS_LOCK).is_writer()
            with self._mutex:
                self.uses.append((way, method))
                if held:
                    self.under_lock.append((way, method))
            return real(*args, **kwargs)

        return checked

    def calls(self, method):
        with self._mutex:
            return sum(1 for way, m in self.uses if way == "call" and m == method)


class _OutsideNovasLock(KeepsTestMethod, PatientWaits):
    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.rtagent = self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        self.watch = _LockWatch()
        for host in ("host1", "host2"):
            compute = self._start_compute(host)
            # The link is made at the service's start (its first periodic).
            self.watch.wrap(compute.manager.rt.link)
        self.flavors = self.api.get_flavors()

    def test_no_agent_call_under_novas_lock(self):
        server = self._create_server(flavor_id=self.flavors[0]["id"], networks="none")
        # Resized to the other host and reverted; then on its own host,
        # confirmed.
        self.flags(allow_resize_to_same_host=False)
        self._resize_server(server, self.flavors[1]["id"])
        self._revert_resize(server)
        self.flags(allow_resize_to_same_host=True)
        server = self._resize_server(server, self.flavors[1]["id"])
        self._confirm_resize(server)
        server = self._live_migrate(server)
        self._shelve_server(server)
        server = self._unshelve_server(server)
        self._run_periodics()
        self._delete_server(server)
        self._run_periodics()

        # The watch saw the agent used as this sequence uses it.
        self.assertLessEqual({"call", "audit", "reread"}, {way for way, _ in self.watch.uses})
        for method in ("instance_claim", "start_move", "finish_move", "update_instance"):
            self.assertGreater(self.watch.calls(method), 0, method)
        self.assertEqual([], self.watch.under_lock)

    def test_a_claim_is_one_agent_call(self):
        before = len(self.watch.uses)
        self._create_server(flavor_id=self.flavors[0]["id"], networks="none")
        calls = [m for way, m in self.watch.uses[before:] if way == "call"]
        self.assertEqual(1, calls.count("instance_claim"), calls)
        # The claim's reply carries the node's view (RPC 1.9): no
        # get_compute_node follows it. What comes next is ComputeManager's
        # own: the instance's new states, the build's outcome.
        after_claim = calls[calls.index("instance_claim") + 1 :]
        self.assertTrue(after_claim, calls)
        self.assertNotEqual("get_compute_node", after_claim[0], calls)


class OutsideNovasLockInProcess(_OutsideNovasLock, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"


class OutsideNovasLockOverRpc(_OutsideNovasLock, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "rpc"
