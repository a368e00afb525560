"""What the agent publishes for one node, and what it remembers about it.

One :class:`NodePublisher` per node holds everything a node's publishing
needs between syncs: its tree sync (and the cached Placement view), the
sync's backoff, and the allocation passes (:mod:`rtagent.placement.passes`:
healing, the unknown-consumer report, the pinned-vCPU move, the PCI device
allocations), run in order after each tree sync. The agent keeps one of
these per node instead of parallel dicts keyed by node.

All of it runs in one syncing thread at a time (the audit's or the prompt
sync's, serialised by the agent), outside every tracker lock: it reads the
tracker's published snapshot and calls the tracker only for its short
writes (ratios seen in Placement, consumers healed).

Both healing and the unknown-consumer report use the tracker's one
definition of the consumers a node knows (``NodeSnapshot.known_consumers``
and its part ``healable``), so a consumer can never be at once "not
unknown" to the report and "dead" to the healer.
"""

import time

from rtagent.placement import errors as placement_errors
from rtagent.placement import passes as passmod
from rtagent.placement.passes import pinned_vcpus
from rtagent.resources import PCPU


class NodePublisher:
    """Publishes one node to Placement.

    :param node_uuid: the node (its root provider's UUID).
    :param sync: a :class:`rtagent.placement.sync.ProviderSync` of its own.
    :param backoff: a :class:`rtagent.placement.backoff.SyncBackoff`.
    :param client: the PlacementClient for the allocation passes, or None
        to run none.
    :param heal_budget: a :class:`rtagent.placement.passes.heal.HealBudget`.
    :param wall: the wall clock, for the times status reports.
    :param checked: a :class:`~rtagent.placement.checkpoint.MetaRecord`
        keeping, across restarts, the root generation at which the
        unknown-consumer check last found nothing (or None).
    :param unknown_after: seconds between the two audits that must find a
        consumer before it is reported unknown (the refresh interval).
    :param clock: monotonic seconds for that rule (default
        ``time.monotonic``).
    """

    def __init__(
        self,
        node_uuid,
        sync,
        backoff,
        client=None,
        heal_budget=None,
        *,
        wall=time.time,
        checked=None,
        unknown_after=0.0,
        clock=None,
    ):
        self.node_uuid = node_uuid
        self._wall = wall
        self.sync = sync
        self.backoff = backoff
        self.passes = (
            passmod.standard(
                client,
                heal_budget=heal_budget,
                checked=checked,
                unknown_after=unknown_after,
                clock=clock,
            )
            if client is not None
            else passmod.Passes()
        )
        # The report operators ask for by name (status, report_unknown).
        self._unknown = self.passes.unknown

    def publish(
        self,
        tracker,
        desired,
        held=None,
        drop=frozenset(),
        driver_allocations=None,
        *,
        audit=True,
    ):
        """Sync ``desired``, then run the allocation passes in order. One
        syncing thread at a time. ``held``, ``drop`` and
        ``driver_allocations``: see
        :meth:`~rtagent.placement.sync.ProviderSync.sync`; ``audit``: False
        for a prompt sync (see :class:`~.passes.SyncedNode`).

        :returns: the :class:`~rtagent.placement.sync.SyncResult`.
        :raises SyncBackingOff: an earlier failure's backoff is not over.
        :raises PlacementError: the sync or a pass failed (backoff starts).
        """
        if not self.backoff.due():
            # No request now, but the node is still out of sync: say so, so
            # that health and status never read a skipped tick as a success.
            status = self.backoff.status()
            raise placement_errors.SyncBackingOff(
                node=self.node_uuid, retry_in=status.retry_in, last_error=status.last_error
            )
        try:
            # A new, moved or deleted consumer makes the sync look at
            # Placement now, whatever its refresh interval.
            snapshot = tracker.snapshot()
            outcome = self.sync.sync(
                desired,
                local=snapshot.known_consumers,
                held=self._with_pinned(desired, snapshot, held),
                drop=drop,
                driver_allocations=driver_allocations,
            )
            tracker.set_placement_ratios(self.sync.placement_ratios(self.node_uuid))
            node = passmod.SyncedNode(
                self.node_uuid, tracker, self.sync.view, outcome.tree, held or {}, audit=audit
            )
            for step in self.passes:
                node = step.run(node)
        except placement_errors.PlacementError as exc:
            self.backoff.record_failure(exc)
            raise
        self.backoff.record_success()
        return outcome

    def _with_pinned(self, desired, snapshot, held):
        """``held`` and, when the sync is to add PCPU to the root, the PCPU
        the node's pinned claims hold: the sync then moves their VCPU to
        PCPU in the reshape that adds it (nova's VCPU-to-PCPU reshape, see
        :mod:`rtagent.placement.passes.pinned_vcpus`). O(instances) only
        then; other syncs pass ``held`` as it is."""
        wanted = desired.get(self.node_uuid)
        if wanted is None or PCPU not in wanted.inventories:
            return held
        known = self.sync.view.get(self.node_uuid)
        if known is not None and PCPU in known.inventories:
            return held
        pinned = pinned_vcpus.holdings(snapshot)
        if not pinned:
            return held
        merged = {c: {rp: dict(res) for rp, res in a.items()} for c, a in (held or {}).items()}
        for consumer, allocs in pinned.items():
            for rp, res in allocs.items():
                merged.setdefault(consumer, {}).setdefault(rp, {}).update(res)
        return merged

    def report_unknown(self, tracker):
        """Check now (every provider's allocations) and adopt the findings
        at once (an operator asked). :returns: {consumer: allocations}."""
        if self._unknown is None:
            return {}
        return self._unknown.report_now(tracker, self.sync.view)

    def unknown(self, known=frozenset()):
        """{consumer: allocations} as last reported, less those in ``known``
        (the node's current known consumers: a claim may have arrived since)."""
        return {} if self._unknown is None else self._unknown.unknown(known)

    def _next_read(self):
        """Wall-clock time of the next read of Placement an unchanged node
        makes (None: every audit reads)."""
        due_in = self.sync.refresh_due_in()
        return None if due_in is None else self._wall() + due_in

    def status(self, known=frozenset()):
        """The node's sync state for status, health and metrics."""
        state = dict(self.backoff.status().to_dict(), unknown_consumers=[], healing_backlog=0)
        for step in self.passes:
            state.update(step.status(known))
        state["next_placement_read"] = self._next_read()
        return state
