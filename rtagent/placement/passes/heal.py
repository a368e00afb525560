"""Healing: the allocations of consumers that left this node, removed
from its providers.

Healing removes a consumer's allocations from *our* providers only, and
only for consumers the tracker says left this node and are not active on
it again (``snapshot.healable``: aborted, deleted, shelved-offloaded, moved
away, and not claimed or moving back since). It writes with the
consumer's generation (``PUT /allocations/{c}`` with what remains on other
providers, ``{}`` when nothing does), never ``DELETE``: a concurrent writer
makes our write fail instead of being undone by it.

A released consumer is healed only after it has been seen *twice* with the
same consumer generation, on two passes, the second a periodic audit's.
Nova once deleted the allocations of instances still being built: a
scheduler that places an instance back on this node writes its allocation
(moving the generation) before the claim reaches the tracker. Between two
passes the claim arrives (the instance stops being released) or the
generation moves (we look again); either way the new allocation survives.
A prompt sync may find a consumer, never heal it: prompt syncs come a
fraction of a second apart, and nova moves a reverted resize's
allocations back itself, on the source, a moment after the destination's
``revert_move`` released the instance here (two prompt syncs 0.2 s apart
once healed the instance's consumer first, and nova's move then failed on
its generation). An instance released as deleted (``update_instance`` with
``vm_state`` ``deleted``: ``snapshot.deleted``) is healed at the first
look: a deleted instance is never placed again, so there is no claim to
wait for. The write still carries the generation read, so a writer in
between makes it fail and the consumer is looked at again.

Each pass is bounded by a :class:`HealBudget` (consumers and seconds):
after a mass delete against a slow Placement one run must not outlast the
watchdog. What the budget leaves is carried to the next run and reported
(``healing_backlog``).
"""

import dataclasses
import logging
import time

from rtagent.placement import errors
from rtagent.placement.consumers import consumer_type

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class HealResult:
    """What one healing pass did.

    :param healed: consumers with nothing left on our providers (the caller
        may ``tracker.forget_released`` them).
    :param removed: consumer -> {provider: {class: amount}} removed now.
    :param pending: consumers seen for the first time (or changed since
        last seen), to be healed on a later pass.
    :param conflicts: consumers whose write lost to a concurrent writer.
    :param deferred: consumers the budget left for a later pass.
    :param restored: consumers that became live again just as their
        allocations were removed, which were then put back.
    """

    healed: frozenset = frozenset()
    removed: dict = dataclasses.field(default_factory=dict)
    pending: frozenset = frozenset()
    conflicts: frozenset = frozenset()
    deferred: frozenset = frozenset()
    restored: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class HealBudget:
    """How much one healing pass may do.

    :param max_consumers: consumers looked at (one GET each, and one PUT
        for each one healed).
    :param max_seconds: wall time; the pass stops before the next consumer
        once it is spent.
    """

    max_consumers: int = 100
    max_seconds: float = 10.0

    def __post_init__(self):
        if self.max_consumers < 1 or self.max_seconds <= 0:
            raise ValueError(f"invalid healing budget {self}")


class AllocationHealer:
    """Removes released consumers' allocations from our providers.

    Holds, between passes, the consumer generation last seen per released
    consumer. Not thread-safe: one pass at a time (the audit thread).

    :param budget: a :class:`HealBudget` per pass.
    :param clock: monotonic seconds (injected by tests).
    """

    def __init__(self, client, budget=None, clock=time.monotonic):
        self._client = client
        self._budget = budget or HealBudget()
        self._clock = clock
        self._seen = {}

    def heal(self, released, providers, still_released=None, at_once=frozenset(), confirm=True):
        """One pass over ``released`` consumers, within the budget.

        Costs nothing when ``released`` is empty; otherwise one GET per
        consumer looked at and one PUT per consumer healed. Consumers seen
        on an earlier pass come first (they are the ones a write may heal
        now), then the others in UUID order; what the budget leaves is
        ``deferred``.

        :param released: consumer UUIDs the tracker says left the node.
        :param providers: UUIDs of the providers this agent owns.
        :param still_released: callable(uuid) -> bool, asked just before a
            write (the tracker may have taken the instance back meanwhile).
        :param at_once: those of ``released`` to heal at the first look
            (deleted for good).
        :param confirm: whether this pass may heal a consumer seen before
            (False at a prompt sync: it only finds them).
        :raises PlacementUnavailable: stop here; the next pass re-reads.
        """
        providers = frozenset(providers)
        released = frozenset(released)
        self._seen = {c: g for c, g in self._seen.items() if c in released}
        healed, pending, conflicts, restored, removed = set(), set(), set(), set(), {}
        order = sorted(released, key=lambda c: (c not in self._seen, c))
        deadline = self._clock() + self._budget.max_seconds
        deferred = frozenset()
        for index, consumer in enumerate(order):
            if index >= self._budget.max_consumers or self._clock() >= deadline:
                deferred = frozenset(order[index:])
                break
            body = self._client.get_allocations(consumer)
            allocs = body.get("allocations") or {}
            ours = {rp: dict(a["resources"]) for rp, a in allocs.items() if rp in providers}
            if not ours:
                healed.add(consumer)
                self._seen.pop(consumer, None)
                continue
            generation = body["consumer_generation"]
            if consumer not in at_once and (
                self._seen.get(consumer, _UNSEEN) != generation or not confirm
            ):
                self._seen[consumer] = generation
                pending.add(consumer)
                continue
            if still_released is not None and not still_released(consumer):
                self._seen.pop(consumer, None)
                continue
            rest = {rp: a["resources"] for rp, a in allocs.items() if rp not in providers}
            try:
                self._client.put_allocations(
                    consumer,
                    rest,
                    consumer_generation=generation,
                    project_id=body["project_id"],
                    user_id=body["user_id"],
                    consumer_type=consumer_type(body),
                )
            except errors.GenerationConflict:
                # Someone wrote to it after our read: look again next pass.
                self._seen.pop(consumer, None)
                conflicts.add(consumer)
                continue
            self._seen.pop(consumer, None)
            if still_released is not None and not still_released(consumer):
                # Its claim arrived between our check and our write (a
                # retried standalone claim that found its allocation present,
                # a late claim): it is live again, so put back what we took.
                self._restore(consumer, ours, body)
                restored.add(consumer)
                continue
            healed.add(consumer)
            removed[consumer] = ours
            LOG.warning(
                "Healed allocations of released consumer %s on provider(s) %s: %s",
                consumer,
                ", ".join(sorted(ours)),
                ours,
            )
        if deferred:
            LOG.info(
                "Healing pass stopped at its budget (%d consumers, %.0f s): %d released "
                "consumer(s) left for the next pass",
                self._budget.max_consumers,
                self._budget.max_seconds,
                len(deferred),
            )
        return HealResult(
            healed=frozenset(healed),
            removed=removed,
            pending=frozenset(pending),
            conflicts=frozenset(conflicts),
            deferred=deferred,
            restored=frozenset(restored),
        )

    def _restore(self, consumer, ours, owner):
        """Put ``ours`` back on a consumer that became live again after our
        write removed it; what others wrote meanwhile is kept."""
        body = self._client.get_allocations(consumer)
        current = {rp: dict(a["resources"]) for rp, a in (body.get("allocations") or {}).items()}
        if all(rp in current for rp in ours):
            return  # its owner wrote it again already
        try:
            self._client.put_allocations(
                consumer,
                {**current, **ours},
                consumer_generation=body["consumer_generation"],
                project_id=owner["project_id"],
                user_id=owner["user_id"],
                consumer_type=consumer_type(owner),
            )
        except errors.GenerationConflict:
            LOG.error(
                "Consumer %s became live while its allocations %s were being healed, and "
                "changed again before they could be put back: check it",
                consumer,
                ours,
            )
            return
        LOG.warning(
            "Consumer %s became live while being healed: its allocations %s are put back",
            consumer,
            ours,
        )


_UNSEEN = object()


class HealPass:
    """The healing pass of one node (see :mod:`rtagent.placement.passes`).

    Costs nothing while the node has no released consumer.
    """

    name = "heal"

    def __init__(self, client, budget=None):
        self._healer = AllocationHealer(client, budget)
        # Written by the syncing thread only; other threads read whole values.
        self._backlog = 0

    def run(self, node):
        tracker = node.tracker
        snapshot = tracker.snapshot()
        if not snapshot.healable:
            self._backlog = 0
            return node
        result = self._healer.heal(
            snapshot.healable,
            [p.uuid for p in node.tree],
            still_released=lambda consumer: consumer in tracker.snapshot().healable,
            at_once=snapshot.deleted,
            confirm=node.audit,
        )
        if result.healed:
            tracker.forget_released(result.healed)
        self._backlog = len(result.deferred)
        return node.after(emptied=result.healed)

    def status(self, known):
        return {"healing_backlog": self._backlog}
