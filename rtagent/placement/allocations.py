"""Healing allocations this agent can prove dead, and reporting the others.

Healing removes a consumer's allocations from *our* providers only, and
only for consumers the tracker says left this node and are not active on
it again (``snapshot.healable``: aborted, deleted, shelved-offloaded, moved
away, and not claimed or moving back since). It writes with the
consumer's generation (``PUT /allocations/{c}`` with what remains on other
providers, ``{}`` when nothing does), never ``DELETE``: a concurrent writer
makes our write fail instead of being undone by it.

A released consumer is healed only after it has been seen *twice* with the
same consumer generation, on two passes (two audit ticks). Nova once deleted
the allocations of instances still being built: a scheduler that places an
instance back on this node writes its allocation (moving the generation)
before the claim reaches the tracker. Between two ticks the claim arrives
(the instance stops being released) or the generation moves (we look again);
either way the new allocation survives.

Each pass is bounded by a :class:`HealBudget` (consumers and seconds):
after a mass delete against a slow Placement one tick must not outlast the
watchdog. What the budget leaves is carried to the next pass and reported.

Allocations of consumers nobody here knows about are reported, never
touched (:func:`unknown_consumers`, :class:`ConsumerReport`).
"""

import dataclasses
import logging
import re
import time

from rtagent.placement import errors

LOG = logging.getLogger(__name__)

# A consumer written by an older client has no type; nova writes INSTANCE.
DEFAULT_CONSUMER_TYPE = "INSTANCE"
_CONSUMER_TYPE = re.compile(r"\A[A-Z0-9_]{1,255}\Z")


def consumer_type(body):
    """The ``consumer_type`` to write back for a consumer as Placement
    answered it (``GET /allocations/{c}``): its own, or INSTANCE for one
    that has none. Placement shows a consumer written before consumer
    types as ``unknown``, a value it refuses on write."""
    found = body.get("consumer_type")
    if isinstance(found, str) and _CONSUMER_TYPE.match(found):
        return found
    return DEFAULT_CONSUMER_TYPE


def rewrite(client, consumer, allocations, read):
    """Replace ``consumer``'s allocations with ``allocations``
    ({provider: {class: amount}}), on the ``GET /allocations/{c}`` answer
    ``read`` they are based on: its generation (a writer since makes it a
    conflict, not a lost update), its owner and its consumer type kept.

    :raises GenerationConflict: the consumer changed since ``read``.
    :raises PlacementRequestFailed: Placement refused it (e.g. capacity).
    """
    client.put_allocations(
        consumer,
        allocations,
        consumer_generation=read["consumer_generation"],
        project_id=read["project_id"],
        user_id=read["user_id"],
        consumer_type=consumer_type(read),
    )


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

    def heal(self, released, providers, still_released=None):
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
            if self._seen.get(consumer, _UNSEEN) != generation:
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


def unknown_consumers(client, providers, known):
    """Allocations on ``providers`` held by consumers not in ``known``.

    One GET per provider: call it when a provider's generation moved (the
    sync re-read it), at start-up, or on demand, not on every tick.

    :param known: consumer UUIDs this agent accounts for (tracked
        instances, moves in progress, released consumers).
    :returns: {consumer: {provider: {class: amount}}}.
    """
    found = {}
    for rp in sorted(providers):
        _, allocs = client.get_provider_allocations(rp)
        for consumer, resources in allocs.items():
            if consumer not in known:
                found.setdefault(consumer, {})[rp] = resources
    return found


class ConsumerReport:
    """The last unknown-consumer findings, logged once per consumer."""

    def __init__(self):
        self._unknown = {}

    @property
    def unknown(self):
        """{consumer: {provider: {class: amount}}} from the last update."""
        return dict(self._unknown)

    def forget(self, known):
        """Drop consumers that became known (their claim or move arrived
        after they were reported)."""
        cleared = sorted(set(self._unknown) & set(known))
        for consumer in cleared:
            LOG.info("Consumer %s is known to this agent now: no longer reported", consumer)
        if cleared:
            self._unknown = {c: a for c, a in self._unknown.items() if c not in known}

    def update(self, found):
        """Adopt ``found`` (from :func:`unknown_consumers`); log new ones."""
        for consumer in sorted(set(found) - set(self._unknown)):
            LOG.warning(
                "Consumer %s holds allocations on this node's providers but is "
                "unknown to this agent; left alone: %s",
                consumer,
                found[consumer],
            )
        self._unknown = dict(found)
        return self.unknown


class AllocationIndex:
    """Who holds what on our providers, kept current without reading every
    allocation of a provider each time its generation moves.

    Reading ``GET /resource_providers/{rp}/allocations`` costs Placement
    O(N) (all N consumers' rows, serialized): 59 ms of its CPU at N=1000,
    four times the tick's one read. Allocations move the generation on every
    claim, so a busy node paid it on nearly every tick. Instead, after one
    full read the index follows the changes it can name:

    - consumers whose record at the tracker changed since the last update
      (a claim arrived, a move started or ended) or that the node stopped
      knowing are read one by one (``GET /allocations/{c}``, O(1) each); a
      release alone is not read: it changes nothing in Placement, healing
      does;
    - consumers healing left with nothing here are dropped (:meth:`forget`);
    - then each provider whose generation moved is checked against
      ``GET /resource_providers/{rp}/usages``: Placement's per-class totals
      must equal the index's sums. Every allocation is at least 1, so a new
      consumer, or a change the index was not told about, makes them
      differ, and that provider is read in full as before.

    The full read stays the answer whenever the index may be wrong: the
    first time, when the index holds consumers the node does not know (they
    are what the report is about, so it is re-read exactly as before), when
    more than ``max_consumer_reads`` consumers changed at once (one full
    read is then cheaper), and on :meth:`unknown` with ``full=True`` (an
    operator asked). What the sums cannot see is a change to a consumer the
    tracker was not told about that exactly cancels, class by class, a new
    consumer's allocation in the same tick; the next full read finds it.

    Not thread-safe: the audit thread only.
    """

    def __init__(self, client, max_consumer_reads=8):
        self._client = client
        self._max_reads = max_consumer_reads
        self._held = {}  # provider -> {consumer: {class: amount}}
        self._generations = {}  # provider -> generation the index matches
        self._marks = {}  # known consumer -> its tracker record, last update

    def unknown(self, generations, marks, full=False):
        """Allocations on our providers of consumers not in ``marks``.

        :param generations: {provider uuid: generation} as last listed.
        :param marks: {consumer: value} for every consumer the node knows;
            the value changes whenever the tracker's record of the consumer
            changes (see :func:`consumer_marks`).
        :param full: read every provider's allocations in full.
        :returns: {consumer: {provider: {class: amount}}}.
        """
        generations = dict(generations)
        self._held = {rp: held for rp, held in self._held.items() if rp in generations}
        changed = self._changed(marks)
        full = bool(full or set(generations) - set(self._held) or len(changed) > self._max_reads)
        if not full:
            self._read_consumers(changed)
            # Consumers the node does not know are what the report is about:
            # while there are any, their providers are read as before.
            full = any(c not in marks for held in self._held.values() for c in held)
        if full:
            moved = generations
        else:
            moved = [
                rp
                for rp, generation in generations.items()
                if self._generations.get(rp) != generation and not self._sums_match(rp)
            ]
        for rp in sorted(moved):
            _, self._held[rp] = self._client.get_provider_allocations(rp)
        self._generations = generations
        self._marks = dict(marks)
        found = {}
        for rp, held in self._held.items():
            for consumer, resources in held.items():
                if consumer not in marks:
                    found.setdefault(consumer, {})[rp] = dict(resources)
        return found

    def forget(self, consumers):
        """Healing left ``consumers`` with nothing on our providers."""
        for consumer in consumers:
            self._marks.pop(consumer, None)
            for held in self._held.values():
                held.pop(consumer, None)

    def _changed(self, marks):
        """Consumers to read one by one: those whose record changed since
        the last update, and those the node stopped knowing (a finished
        move's consumer: its owner may have removed it, or not). A release
        alone changes nothing in Placement: healing reads and writes those
        consumers (and calls :meth:`forget`)."""
        changed = {
            c for c, m in marks.items() if m != _RELEASED_ONLY and self._marks.get(c, _UNSEEN) != m
        }
        return changed | (set(self._marks) - set(marks))

    def _read_consumers(self, consumers):
        for consumer in sorted(consumers):
            allocs = self._client.get_allocations(consumer).get("allocations") or {}
            for rp, held in self._held.items():
                if rp in allocs:
                    held[consumer] = dict(allocs[rp]["resources"])
                else:
                    held.pop(consumer, None)

    def _sums_match(self, rp):
        sums = {}
        for resources in self._held[rp].values():
            for rc, amount in resources.items():
                sums[rc] = sums.get(rc, 0) + amount
        usages = {rc: n for rc, n in self._client.get_usages(rp).items() if n}
        return usages == {rc: n for rc, n in sums.items() if n}


def consumer_marks(snapshot):
    """{consumer: value} for every consumer ``snapshot`` knows, the value
    changing whenever the tracker's record of that consumer does (its
    instance, its moves, its release). Records are immutable and kept
    between snapshots, so comparing marks is mostly identity checks."""
    marks = {i.uuid: (i,) for i in snapshot.instances}
    for move in snapshot.migrations:
        for consumer in (move.uuid, move.instance_uuid):
            marks[consumer] = (*marks.get(consumer, ()), move)
    for consumer in snapshot.released:
        marks[consumer] = (*marks.get(consumer, ()), _RELEASED)
    return marks


_RELEASED = "released"
_RELEASED_ONLY = (_RELEASED,)
