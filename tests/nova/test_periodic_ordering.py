# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova's periodic through rtagent runs outside nova's ``compute_resources``
lock, so its ordering with claims and deletes is written down and tested
here (docs/nova.md, "The periodic"):

- a claim under way while the periodic reads the agent's claims is not
  released, though nova's rows do not place the instance yet;
- an instance deleted while the periodic runs is not claimed back;
- a periodic that waits on an agent that does not answer holds no lock a
  build needs, and neither does a build's claim or a move's confirm
  waiting on the agent;
- a move step under way (its rows written, the agent not told yet) is left
  to its caller by the periodic.

Each interleaving is forced with events at the seams where the threads
meet, not left to timing. Run by ``make test-nova`` in .venv-nova, in
process and over RPC.
"""

import threading
import time

import fixtures
import oslo_messaging
from nova import context as nova_context
from nova import utils
from nova.tests.functional import integrated_helpers

from rtagent.nova import reconcile
from rtagent.nova.resource_tracker import COMPUTE_RESOURCE_SEMAPHORE
from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

WAIT_S = 30


class _Ordering(KeepsTestMethod, PatientWaits):
    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.rtagent = self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        self.compute = self._start_compute("host1")
        self.flavor = self.api.get_flavors()[0]
        self.node = self._get_provider_uuid_by_host("host1")
        self.ctxt = nova_context.get_admin_context()

    @property
    def rt(self):
        return self.compute.manager.rt

    def _held(self):
        status = self.rtagent.link("host1").call("get_status", node_uuid=self.node)
        return set(status["instance_uuids"])

    def _periodic_paused_in_reconcile(self, before, after=lambda: None):
        """Start nova's periodic in a thread; ``before`` runs when it enters
        the reconciliation (nova's rows already read, the agent's claims
        not yet), ``after`` when it leaves it."""
        real = reconcile.reconcile

        def paused(*args, **kwargs):
            before()
            try:
                return real(*args, **kwargs)
            finally:
                after()

        self.useFixture(fixtures.MockPatch("rtagent.nova.reconcile.reconcile", paused))
        periodic = threading.Thread(
            target=self.compute.manager.update_available_resource, args=(self.ctxt,)
        )
        periodic.start()
        return periodic

    def _wait_until(self, predicate, what):
        deadline = time.monotonic() + WAIT_S
        while not predicate():
            if time.monotonic() > deadline:
                self.fail(f"not within {WAIT_S} s: {what}")
            time.sleep(0.05)

    def test_a_claim_under_way_is_not_released_by_the_periodic(self):
        entered, claimed, reconciled = threading.Event(), threading.Event(), threading.Event()

        def before():
            entered.set()
            # The build's claim reaches the agent now: after the periodic
            # read nova's rows, before it reads the agent's claims.
            self.assertTrue(claimed.wait(WAIT_S))

        periodic = self._periodic_paused_in_reconcile(before, reconciled.set)
        self.assertTrue(entered.wait(WAIT_S))
        real_claim = self.rt._claim

        def claim_then_wait(*args, **kwargs):
            reply = real_claim(*args, **kwargs)
            # The agent holds the claim; nova's rows do not place the
            # instance until this returns.
            claimed.set()
            self.assertTrue(reconciled.wait(WAIT_S))
            return reply

        self.useFixture(fixtures.MockPatchObject(self.rt, "_claim", claim_then_wait))
        server = self._create_server(flavor_id=self.flavor["id"], networks="none")
        periodic.join(WAIT_S)
        self.assertFalse(periodic.is_alive())
        self.assertIn(server["id"], self._held())
        self.assertFlavorMatchesUsage(self.node, self.flavor)

    def test_an_instance_deleted_during_the_periodic_is_not_claimed_back(self):
        server = self._create_server(flavor_id=self.flavor["id"], networks="none")
        self.assertIn(server["id"], self._held())
        entered, go = threading.Event(), threading.Event()

        def before():
            # nova's rows, read already, still list the instance.
            entered.set()
            self.assertTrue(go.wait(WAIT_S))

        periodic = self._periodic_paused_in_reconcile(before)
        self.assertTrue(entered.wait(WAIT_S))
        self._delete_server(server)
        self._wait_until(lambda: server["id"] not in self._held(), "the delete released the claim")
        go.set()
        periodic.join(WAIT_S)
        self.assertFalse(periodic.is_alive())
        self.assertNotIn(server["id"], self._held())
        self.assertEqual(0, self._get_provider_usages(self.node)["VCPU"])

    def _lock_free_while_the_agent_waits(self, method, start, answer_with=None):
        """Run ``start()``, which calls the agent's ``method``; hold that
        call until nova's ``compute_resources`` lock has been taken here,
        and check it was free (nova's own tracker holds it across its
        whole claim, periodic and move step). The held call then returns,
        or raises ``answer_with``. :returns: the agent's real ``call``."""
        link = self.rtagent.link("host1")
        real_call = link.call
        asked, answer = threading.Event(), threading.Event()

        def held(name, **args):
            if name == method:
                # A broker round trip that takes long.
                asked.set()
                answer.wait(WAIT_S)
                if answer_with is not None:
                    raise answer_with
            return real_call(name, **args)

        self.useFixture(fixtures.MockPatchObject(link, "call", held))
        start()
        self.assertTrue(asked.wait(WAIT_S))
        try:
            started = time.monotonic()
            utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)(lambda: None)()
            waited = time.monotonic() - started
        finally:
            answer.set()
        # Another build, a periodic's row writes: none waits for the call.
        # Held by the waiting periodic, the lock would come only when the
        # call gives up, WAIT_S later; free, at once (milliseconds): a third
        # of WAIT_S tells the two apart on a loaded machine too.
        self.assertLess(waited, WAIT_S / 3)
        return real_call

    def test_a_periodic_waiting_on_the_agent_holds_no_lock_a_build_needs(self):
        server = self._create_server(flavor_id=self.flavor["id"], networks="none")
        periodic = threading.Thread(
            target=self.compute.manager.update_available_resource, args=(self.ctxt,)
        )
        # The agent does not answer; the client gives up in the end.
        real_call = self._lock_free_while_the_agent_waits(
            "get_status", periodic.start, oslo_messaging.MessagingTimeout("no answer")
        )
        periodic.join(WAIT_S)
        self.assertFalse(periodic.is_alive())
        self.useFixture(fixtures.MockPatchObject(self.rtagent.link("host1"), "call", real_call))
        self._run_periodics()
        self.assertIn(server["id"], self._held())
        self.assertFlavorMatchesUsage(self.node, self.flavor)

    def test_a_claim_waiting_on_the_agent_holds_no_lock(self):
        body = self._build_server(flavor_id=self.flavor["id"], networks="none")
        started = []
        self._lock_free_while_the_agent_waits(
            "instance_claim", lambda: started.append(self.api.post_server({"server": body}))
        )
        self._wait_for_state_change(started[0], "ACTIVE")
        self.assertIn(started[0]["id"], self._held())

    def _resized_on_the_same_host(self):
        """A server resized on host1 to host1, waiting for confirmation:
        the agent holds its move with the node as source and
        destination."""
        self.flags(allow_resize_to_same_host=True)
        server = self._create_server(flavor_id=self.flavor["id"], networks="none")
        bigger = self.api.get_flavors()[1]
        self._resize_server(server, bigger["id"])
        moves = self.rtagent.link("host1").call("get_status", node_uuid=self.node)["moves"]
        self.assertEqual([server["id"]], [m["instance_uuid"] for m in moves])
        return server, bigger

    def _confirmed_with_its_claim(self, server, bigger):
        """The confirm ended, and the agent still holds the server's claim
        at the new flavor (not released by a step taken twice)."""
        self._wait_for_state_change(server, "ACTIVE")
        self._wait_until(
            lambda: not self.rtagent.link("host1").call("get_status", node_uuid=self.node)["moves"],
            "the confirm finished the agent's move",
        )
        self.assertIn(server["id"], self._held())
        self.assertFlavorMatchesUsage(self.node, bigger)

    def test_a_confirm_during_the_periodic_is_the_confirms_to_take(self):
        server, bigger = self._resized_on_the_same_host()
        written, go = threading.Event(), threading.Event()
        real_rows = self.rt.records.confirm

        def rows_then_wait(*args, **kwargs):
            real_rows(*args, **kwargs)
            # nova's rows say "confirmed"; the agent is not told yet.
            written.set()
            self.assertTrue(go.wait(WAIT_S))

        self.useFixture(fixtures.MockPatchObject(self.rt.records, "confirm", rows_then_wait))
        self.api.post_server_action(server["id"], {"confirmResize": None})
        self.assertTrue(written.wait(WAIT_S))
        try:
            # The periodic reads the migration confirmed: stepped here, the
            # confirm's own step would find no move and release the
            # instance's claim on its one node.
            self.compute.manager.update_available_resource(self.ctxt)
        finally:
            go.set()
        self._confirmed_with_its_claim(server, bigger)
        self._run_periodics()
        self.assertIn(server["id"], self._held())
        self.assertFlavorMatchesUsage(self.node, bigger)

    def test_a_confirm_starting_while_the_periodic_reads_its_migration(self):
        """The periodic checks the mark after it reads the migration: the
        confirm marks its instance before it writes that row, so a row
        that says "confirmed" comes with the mark still set."""
        server, bigger = self._resized_on_the_same_host()
        reading, written, go = threading.Event(), threading.Event(), threading.Event()
        real_read, real_rows = reconcile._migration, self.rt.records.confirm

        def read_once_the_confirm_wrote(context, migration_uuid):
            reading.set()
            self.assertTrue(written.wait(WAIT_S))
            return real_read(context, migration_uuid)

        def rows_then_wait(*args, **kwargs):
            real_rows(*args, **kwargs)
            written.set()
            self.assertTrue(go.wait(WAIT_S))

        self.useFixture(
            fixtures.MockPatch("rtagent.nova.reconcile._migration", read_once_the_confirm_wrote)
        )
        self.useFixture(fixtures.MockPatchObject(self.rt.records, "confirm", rows_then_wait))
        periodic = threading.Thread(
            target=self.compute.manager.update_available_resource, args=(self.ctxt,)
        )
        periodic.start()
        try:
            self.assertTrue(reading.wait(WAIT_S))
            self.api.post_server_action(server["id"], {"confirmResize": None})
            periodic.join(WAIT_S)
            self.assertFalse(periodic.is_alive())
        finally:
            go.set()
        self._confirmed_with_its_claim(server, bigger)

    def test_a_confirm_waiting_on_the_agent_holds_no_lock(self):
        server, bigger = self._resized_on_the_same_host()
        real_call = self._lock_free_while_the_agent_waits(
            "confirm_move",
            lambda: self.api.post_server_action(server["id"], {"confirmResize": None}),
        )
        self._wait_for_state_change(server, "ACTIVE")
        self._wait_for_migration_status(server, ["confirmed"])
        self._wait_until(lambda: not real_call("get_status", node_uuid=self.node)["moves"], "moved")
        self.assertFlavorMatchesUsage(self.node, bigger)


class OrderingInProcess(_Ordering, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"


class OrderingOverRpc(_Ordering, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "rpc"
