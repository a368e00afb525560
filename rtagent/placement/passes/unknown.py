"""Unknown consumers: allocations on this node's providers held by
consumers it does not know, reported and never touched.

A consumer the node does not know may be a claim about to arrive (the
scheduler writes its allocation first), someone else's consumer on a
shared provider, or a leak: nothing here can tell which, so it is
reported (log, status, metrics), never written. A consumer is reported
once two periodic audits at least a refresh interval apart
(``confirm_after``) have found it, and stops being reported as soon as
its claim or move arrives. A prompt sync may find a candidate, never
confirm one: prompt syncs come half a second apart while a burst of
claims lands (concurrent evacuations), and a claim its scheduler
allocated for a moment before is no leak.

Finding them cheaply is :class:`AllocationIndex`'s job; what was reported
is :class:`ConsumerReport`'s; :class:`UnknownConsumerPass` runs the check
only when the root's generation moved. A new allocation moves it, a removed
one does not (Placement bumps the generations of the providers a write
allocates on, not of those it frees): a reported consumer whose allocation
someone else removed (nova's ``move_allocations`` at a move cut short, an
operator's ``nova-manage placement audit --delete``) would stay reported
until some other change. So while consumers are reported, each audit reads
them again, one by one, and drops those that hold nothing here any more.
"""

import logging
import time

LOG = logging.getLogger(__name__)


def pool_provider_uuids(snapshot):
    """The sharing providers of the node's disk pool (other hosts'
    consumers hold allocations there)."""
    pool = getattr(snapshot.host, "disk_pool", None) if snapshot.host is not None else None
    return frozenset({pool.provider_uuid}) if pool is not None else frozenset()


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

    def drop(self, gone):
        """Drop consumers that hold nothing on the node's providers any
        more (someone else removed their allocation)."""
        cleared = sorted(set(self._unknown) & set(gone))
        for consumer in cleared:
            LOG.info(
                "Consumer %s holds nothing on this node's providers any more: no longer reported",
                consumer,
            )
        if cleared:
            self._unknown = {c: a for c, a in self._unknown.items() if c not in gone}

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
    consumer's allocation in the same tick (nova's conductor swapping an
    instance's allocation for its move's migration consumer): the move's
    record, or healing proving the index wrong (:meth:`forget`), makes the
    index read it.

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

    def recheck(self, consumers):
        """Read ``consumers`` again, one by one (O(1) each); :returns:
        those of them that hold nothing on the indexed providers now."""
        self._read_consumers(consumers)
        return {c for c in consumers if not any(c in held for held in self._held.values())}

    def forget(self, consumers):
        """``consumers`` hold nothing on our providers now (healing proved
        it): dropped without reading them again. :returns: True when the
        index still held one of them somewhere.

        Such a provider's sums are checked again at the next update, even
        if its generation has not moved: the index was wrong about it, and
        what it missed may be a swap the sums cannot see. nova's conductor
        moves an instance's allocation to the move's migration consumer in
        one write (the same amounts, class by class); when the move is
        recorded here only after it has ended (Placement down meanwhile),
        the migration consumer was never read, and once the instance's
        entry is gone the sums tell (make test-cloud-faults'
        placement_down_60s leaked it unreported)."""
        stale = False
        for consumer in consumers:
            self._marks.pop(consumer, None)
            for rp, held in self._held.items():
                if held.pop(consumer, None) is not None:
                    self._generations.pop(rp, None)
                    stale = True
        return stale

    def _changed(self, marks):
        """Consumers to read one by one: those whose record changed since
        the last update, and those the node stopped knowing (a finished
        move's consumer: its owner may have removed it, or not). A release
        alone changes nothing in Placement: healing reads and writes those
        consumers (and the pass calls :meth:`forget`)."""
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
_UNSEEN = object()


class UnknownConsumerPass:
    """The unknown-consumer check of one node (see
    :mod:`rtagent.placement.passes`).

    :param checked: a :class:`~rtagent.placement.checkpoint.MetaRecord`
        keeping, across restarts, the root generation at which the check
        last found nothing (or None).
    """

    name = "unknown_consumers"

    def __init__(self, client, checked=None, *, confirm_after=0.0, clock=None):
        self._index = AllocationIndex(client)
        self._report = ConsumerReport()
        self._confirm_after = confirm_after
        self._clock = clock or time.monotonic
        # Candidates found unknown and not yet reported -> when an audit
        # first found them (the clock's seconds; None while only prompt
        # syncs have), and the root generation the last check saw: the
        # check runs again when it moves, or at an audit once a candidate
        # is due.
        self._candidates = {}
        self._generation = None
        # A restart resumes from the last clean check: with the root's
        # generation unchanged, no allocation moved, so there is nothing to
        # look for (a fleet restarted at once would otherwise read every
        # provider's allocations together). Any allocation change moves the
        # generation, and the check runs as before.
        self._checked = checked
        self._saved = None
        # The consumers the node knew at the last run: one it has stopped
        # knowing since (a finished move's migration consumer) may still
        # hold its allocation, and nothing moves the generation then.
        self._known = frozenset()
        if checked is not None:
            found = checked.load()
            if isinstance(found, dict) and isinstance(found.get("generation"), int):
                self._generation = found["generation"]

    def run(self, node):
        stale = self._index.forget(node.emptied)
        known = node.tracker.snapshot().known_consumers
        self._report.forget(known)
        root = node.root
        if root is None:
            return node
        now = self._clock()
        # Candidates are looked at again at the first audit they are due
        # at (or that has not seen them yet), even if nothing moved;
        # otherwise only when the generation moves, or when the node
        # stopped knowing a consumer that healing did not empty: its owner
        # was to delete its allocation (nova at a move's end), and a delete
        # that never came moves nothing in Placement (make
        # test-cloud-faults' placement_down_60s). The index reads such a
        # consumer alone (``GET /allocations/{c}``). Also when healing
        # emptied a consumer the index held (see AllocationIndex.forget).
        forgotten = self._known - known - set(node.emptied)
        due = node.audit and any(
            first is None or self._due(first, now) for first in self._candidates.values()
        )
        if self._generation == root.generation and not due and not forgotten and not stale:
            self._known = known
            if node.audit and self._report.unknown:
                # A removal does not move the generation (see above).
                self._report.drop(self._index.recheck(sorted(self._report.unknown)))
            return node
        found = self.find(node.tracker, node.view)
        # Only once the check has read them: a check that failed (Placement
        # went away) looks at the forgotten consumers again next time.
        self._known = known
        reported = set(self._report.unknown)
        confirmed = {
            c
            for c in found
            if c in reported
            or (node.audit and c in self._candidates and self._due(self._candidates[c], now))
        }
        # An audit's first sighting starts a candidate's time; a prompt
        # sync's starts nothing (two audits must find it).
        candidates = {}
        for c in found.keys() - confirmed:
            first = self._candidates.get(c)
            candidates[c] = now if first is None and node.audit else first
        self._candidates = candidates
        self._generation = root.generation
        self._report.update({c: found[c] for c in confirmed})
        record = {"generation": None if found else root.generation}
        if self._checked is not None and record != self._saved:
            # Written when it changes only: at most once per run whose
            # allocations moved, never in steady state.
            self._checked.save(record)
            self._saved = record
        return node

    def _due(self, first, now):
        """True once a candidate an audit first found at ``first`` (None:
        no audit has yet) may be confirmed."""
        return first is not None and now - first >= self._confirm_after

    def find(self, tracker, view, full=False):
        """Allocations on ``view``'s providers of consumers the node does
        not know (see :class:`AllocationIndex` for what it reads; ``full``:
        every provider's allocations). :returns: {consumer: allocations}."""
        marks = consumer_marks(tracker.snapshot())
        # A shared pool's provider holds other hosts' consumers: theirs.
        shared = pool_provider_uuids(tracker.snapshot())
        generations = {u: g for u, g in view.generations().items() if u not in shared}
        found = self._index.unknown(generations, marks, full=full)
        # A claim that arrived while we read is known now.
        known = tracker.snapshot().known_consumers
        return {c: a for c, a in found.items() if c not in known}

    def report_now(self, tracker, view):
        """Check now and adopt the findings at once (an operator asked).
        :returns: {consumer: allocations}."""
        return self._report.update(self.find(tracker, view, full=True))

    def unknown(self, known=frozenset()):
        """{consumer: allocations} as last reported, less those in ``known``
        (the node's current known consumers: a claim may have arrived since)."""
        return {c: a for c, a in self._report.unknown.items() if c not in known}

    def status(self, known):
        return {"unknown_consumers": sorted(self.unknown(known))}
