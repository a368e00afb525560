"""What the agent publishes for one node, and what it remembers about it.

One :class:`NodePublisher` per node holds everything a node's publishing
needs between ticks: its Placement sync (and the cached Placement view),
the sync's backoff, the healer of released consumers, and the report of
unknown consumers. The agent keeps one of these per node instead of
parallel dicts keyed by node.

All of it runs in the audit thread, outside every tracker lock: it reads
the tracker's published snapshot and calls the tracker only for its short
writes (ratios seen in Placement, consumers healed).

Both healing and the unknown-consumer report use the tracker's one
definition of the consumers a node knows (``NodeSnapshot.known_consumers``
and its part ``healable``), so a consumer can never be at once "not
unknown" to the report and "dead" to the healer.
"""

import logging
import time

from rtagent.placement import allocations, pcialloc, pinned
from rtagent.placement import errors as placement_errors

LOG = logging.getLogger(__name__)


class NodePublisher:
    """Publishes one node to Placement.

    :param node_uuid: the node (its root provider's UUID).
    :param sync: a :class:`rtagent.placement.sync.ProviderSync` of its own.
    :param backoff: a :class:`rtagent.placement.backoff.SyncBackoff`.
    :param client: the PlacementClient for healing and the unknown-consumer
        check, or None to do neither.
    :param heal_budget: a :class:`rtagent.placement.allocations.HealBudget`.
    :param wall: the wall clock, for the times status reports.
    :param checked: a :class:`~rtagent.placement.checkpoint.MetaRecord`
        keeping, across restarts, the root generation at which the
        unknown-consumer check last found nothing (or None).
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
    ):
        self.node_uuid = node_uuid
        self._wall = wall
        self.sync = sync
        self.backoff = backoff
        self._client = client
        self._healer = (
            allocations.AllocationHealer(client, heal_budget) if client is not None else None
        )
        self._report = allocations.ConsumerReport()
        self._index = allocations.AllocationIndex(client) if client is not None else None
        self._pinned = pinned.PinnedAllocations(client) if client is not None else None
        self._devices = pcialloc.DeviceAllocations(client) if client is not None else None
        # Candidates found unknown at the last check, and the root generation
        # that check saw: the check runs again only when it moves.
        self._candidates = {}
        self._checked_generation = None
        # A restart resumes from the last clean check: with the root's
        # generation unchanged, no allocation moved, so there is nothing to
        # look for (a fleet restarted at once would otherwise read every
        # provider's allocations together). Any allocation change moves the
        # generation, and the check runs as before.
        self._checked = checked
        self._checked_saved = None
        if checked is not None:
            found = checked.load()
            if isinstance(found, dict) and isinstance(found.get("generation"), int):
                self._checked_generation = found["generation"]
        # Written by the audit thread only; other threads read whole values.
        self._heal_backlog = 0

    def publish(self, tracker, desired, held=None, drop=frozenset()):
        """Sync ``desired``, then heal released consumers and look for
        unknown ones. Audit thread only. ``held`` and ``drop``: see
        :meth:`~rtagent.placement.sync.ProviderSync.sync`.

        :returns: the :class:`~rtagent.placement.sync.SyncResult`.
        :raises SyncBackingOff: an earlier failure's backoff is not over.
        :raises PlacementError: the sync or healing failed (backoff starts).
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
            outcome = self.sync.sync(
                desired, local=tracker.snapshot().known_consumers, held=held, drop=drop
            )
            tracker.set_placement_ratios(self.sync.placement_ratios(self.node_uuid))
            self._heal(tracker, outcome.tree)
            self._check_unknown(tracker)
            self._check_pinned(tracker)
            self._check_devices(tracker, held)
        except placement_errors.PlacementError as exc:
            self.backoff.record_failure(exc)
            raise
        self.backoff.record_success()
        return outcome

    def _heal(self, tracker, desired):
        healable = tracker.snapshot().healable
        if self._healer is None:
            return
        if not healable:
            self._heal_backlog = 0
            return
        result = self._healer.heal(
            healable,
            [p.uuid for p in desired],
            still_released=lambda consumer: consumer in tracker.snapshot().healable,
        )
        if result.healed:
            self._index.forget(result.healed)
            tracker.forget_released(result.healed)
        self._heal_backlog = len(result.deferred)

    def _check_unknown(self, tracker):
        """Report allocations of consumers this node does not know, when the
        root's generation moved (allocations change it). A consumer is
        reported once it is found twice in a row, so an allocation the
        scheduler makes just before its claim arrives is not reported; and
        it stops being reported as soon as its claim or move arrives."""
        self._report.forget(tracker.snapshot().known_consumers)
        root = self.sync.view.get(self.node_uuid)
        if self._client is None or root is None:
            return
        # Candidates not yet confirmed are looked at again on the next tick,
        # even if nothing moved; otherwise only when the generation moves.
        unconfirmed = set(self._candidates) - set(self._report.unknown)
        if self._checked_generation == root.generation and not unconfirmed:
            return
        found = self.find_unknown(tracker)
        previous, self._candidates = self._candidates, found
        self._checked_generation = root.generation
        self._report.update({c: a for c, a in found.items() if c in previous})
        record = {"generation": None if found else root.generation}
        if self._checked is not None and record != self._checked_saved:
            # Written when it changes only: at most once per tick whose
            # allocations moved, never in steady state.
            self._checked.save(record)
            self._checked_saved = record

    def _check_pinned(self, tracker):
        """Move the pinned vCPUs of claimed instances whose allocation
        still counts them as VCPU (nova's legacy pinning) to PCPU; each
        pinned instance is looked at once (see :mod:`.placement.pinned`)."""
        if self._pinned is not None and self.sync.view.get(self.node_uuid) is not None:
            self._pinned.check(self.node_uuid, tracker.snapshot().instances)

    def _check_devices(self, tracker, held):
        """Make each instance's allocation count the PCI devices its claim
        holds on the node's device providers: those a scheduler left out,
        or attached or detached since (see :mod:`.placement.pcialloc`)."""
        if self._devices is None or self.sync.view.get(self.node_uuid) is None:
            return
        if not held and self._devices.idle:
            return
        snapshot = tracker.snapshot()
        moves = snapshot.migrations
        # A resize on this node, or a standalone claim whose allocation is
        # being written: looked at once it is settled.
        same = {m.instance_uuid for m in moves if m.source_node == m.dest_node}
        moving = {m.instance_uuid: m.uuid for m in moves if m.source_node != m.dest_node}
        claimed = frozenset(i.uuid for i in snapshot.instances)
        busy = frozenset(same) | snapshot.pending
        self._devices.check(self.node_uuid, held, busy, moving, claimed)

    def find_unknown(self, tracker, full=False):
        """Allocations on our providers of consumers the node does not know
        (see :class:`~rtagent.placement.allocations.AllocationIndex` for
        what it reads; ``full``: every provider's allocations).
        :returns: {consumer: allocations}."""
        marks = allocations.consumer_marks(tracker.snapshot())
        found = self._index.unknown(self.sync.view.generations(), marks, full=full)
        # A claim that arrived while we read is known now.
        known = tracker.snapshot().known_consumers
        return {c: a for c, a in found.items() if c not in known}

    def report_unknown(self, tracker):
        """Check now and adopt the findings at once (an operator asked).
        :returns: {consumer: allocations}."""
        return self._report.update(self.find_unknown(tracker, full=True))

    def unknown(self, known=frozenset()):
        """{consumer: allocations} as last reported, less those in ``known``
        (the node's current known consumers: a claim may have arrived since)."""
        return {c: a for c, a in self._report.unknown.items() if c not in known}

    def _next_read(self):
        """Wall-clock time of the next read of Placement an unchanged node
        makes (None: every audit reads)."""
        due_in = self.sync.refresh_due_in()
        return None if due_in is None else self._wall() + due_in

    def status(self, known=frozenset()):
        """The node's sync state for status, health and metrics."""
        return dict(
            self.backoff.status().to_dict(),
            unknown_consumers=sorted(self.unknown(known)),
            healing_backlog=self._heal_backlog,
            next_placement_read=self._next_read(),
        )
