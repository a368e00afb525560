"""Keep Placement equal to the desired provider tree, cheaply and safely.

A sync reads the tree (:mod:`.reader`), computes the operations purely
(:mod:`.diff`), writes them (:mod:`.flusher`) and deletes the child
providers no longer desired (:mod:`.children`). A generation conflict
that the flusher does not settle on its own (a reshape's, a provider that
keeps changing while read) retries the whole read-diff-write under one
:class:`~rtagent.placement.retry.RetryPolicy`.

With a ``refresh_interval``, even the read is skipped while the desired
tree and the node's consumers are those of the last sync and the last read
is younger than the interval: every local change (a host or config change,
a claim, a move, a delete) still syncs at once, and only changes made by
someone else (an operator's ratio, a trait, an allocation written behind the
agent's back) wait for the next due read. This is kubelet's
split of its status report from its status computation; it takes the
steady cost per node from one read per audit to one per interval.

When Placement is unreachable the view is dropped only if a write was sent
and its answer lost (its outcome is unknown); a failed read leaves Placement
as it was, so the view is kept and the retry costs one listing, not a
re-read of every provider. With a ``checkpoint`` the view of the last sync
survives a restart (:mod:`.checkpoint`).
"""

import dataclasses
import logging
import random
import time

from rtagent.placement import checkpoint, describe, errors, reader
from rtagent.placement import diff as diffmod
from rtagent.placement.children import PublishedChildren, RememberedChildren
from rtagent.placement.flusher import Flusher
from rtagent.placement.retry import RetryPolicy
from rtagent.placement.seen import PlacementView

# RememberedChildren is built by callers of this module (rtagent.service.builder).
__all__ = ["ProviderSync", "RememberedChildren", "SyncResult"]

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SyncResult:
    """What one sync did: attempts made, operations applied, and the class
    moves done by ``POST /reshaper`` (see :mod:`.reshape`)."""

    attempts: int
    operations: tuple
    reshaped: tuple = ()
    # Consumers given allocations on a class new to a provider (see
    # :func:`.reshape.seeded`), in the same reshape.
    seeded: tuple = ()
    # The tree synced: the desired tree, with children known in Placement
    # under another UUID kept under theirs (:func:`.reader.same_names`).
    tree: object = None
    # False when the sync was skipped: nothing changed locally and the
    # last read of Placement is younger than the refresh interval.
    read: bool = True


@dataclasses.dataclass(frozen=True)
class _Synced:
    """The last successful sync: the tree it was asked for, the node's
    local marker then (its consumers), the tree it synced, and the
    monotonic time from which Placement must be read again to see other
    writers' describe."""

    reported: object
    local: object
    tree: object
    due: float

    def covers(self, desired, local, now):
        """Whether a sync of ``desired`` and ``local`` at ``now`` may skip."""
        return self.reported == desired and self.local == local and now < self.due


class ProviderSync:
    """Keeps Placement equal to the desired tree; holds the cached view.

    Not thread-safe: one sync at a time (the audit loop's thread).

    :param children: a :class:`RememberedChildren` (or None: in memory only,
        so a child dropped while the process was down stays).
    :param checkpoint: a :class:`~rtagent.placement.checkpoint.MetaRecord`
        where the last synced view is kept across restarts (or None: a
        restart reads Placement at its first sync).
    """

    def __init__(
        self,
        client,
        policy=None,
        sleep=time.sleep,
        rng=random.random,
        children=None,
        *,
        refresh_interval=0.0,
        clock=time.monotonic,
        checkpoint=None,
    ):
        self._client = client
        # Seconds an unchanged desired tree goes without reading Placement
        # (0: read at every sync). Jittered down by up to a tenth, so a
        # fleet started together spreads its reads.
        self._refresh_interval = refresh_interval
        self._clock = clock
        self._synced = None
        self._policy = policy or RetryPolicy()
        self._sleep = sleep
        self._rng = rng
        self._view = PlacementView()
        self._children = PublishedChildren(client, children)
        self._flusher = Flusher(client, self._policy, sleep, rng, self._children.published)
        self._checkpoint = checkpoint
        # The record last written: an unchanged one is not written again.
        self._saved = None
        self._restored = None
        if checkpoint is not None and refresh_interval:
            self._restored = _load(checkpoint)

    @property
    def view(self):
        """The last-known Placement view (an immutable ProviderTree)."""
        return self._view.tree

    def invalidate(self, uuid=None):
        """Forget the cached view of ``uuid`` (all providers if None); the
        next sync reads Placement whatever the refresh interval."""
        self._view = PlacementView() if uuid is None else self._view.without(uuid)
        self._synced = None

    def refresh_due_in(self):
        """Seconds until the next sync reads Placement even if nothing
        changed locally; 0 when the next one will; None without a
        refresh interval (every sync reads)."""
        if not self._refresh_interval:
            return None
        if self._synced is None:
            return 0.0
        return max(0.0, self._synced.due - self._clock())

    def placement_ratios(self, uuid):
        """resource class -> allocation ratio Placement holds for ``uuid``."""
        provider = self._view.get(uuid)
        if provider is None:
            return {}
        return {rc: inv.allocation_ratio for rc, inv in provider.inventories.items()}

    def plan(self, desired):
        """What :meth:`sync` would write now, without writing: refresh the
        view (reads only) and diff. :returns: list of diff operations."""
        desired = self._refresh(_root_uuid(desired), desired)
        return diffmod.diff(desired, self._view.tree)

    def sync(self, desired, local=None, held=None, drop=frozenset(), driver_allocations=None):
        """Make Placement hold ``desired``.

        :param local: any value that changes when the node changes in a way
            Placement should be looked at for even if the tree is the same
            (the node's consumers: a claim makes the scheduler's allocation
            appear, a delete makes one to heal); with a refresh interval, a
            sync with the same tree and ``local`` as the last one, within
            the interval, sends nothing.
        :param held: {consumer: {provider: {class: amount}}}: what the
            node's claims hold by local accounting, given to Placement where
            a provider gains a class (:meth:`.flusher.Flusher.flush`).
        :param drop: UUIDs of child providers whose allocations may be
            removed when the desired tree no longer has them
            (:meth:`.children.PublishedChildren.retire`).
        :param driver_allocations: the allocations a virt driver moved for
            ``desired`` (nova's ``ReshapeNeeded``), written with its
            inventories in one ``POST /reshaper``
            (:meth:`.flusher.Flusher.flush`); None without one.

        :raises SyncConflictsExhausted: conflicts outlasted the policy.
        :raises ProviderNameTaken: our root's name belongs to another UUID.
        :raises PlacementUnavailable: the next sync reads Placement; the
            cached view is dropped if a write's answer was lost (its outcome
            is unknown), kept if only a read failed.
        :raises PlacementRequestFailed: Placement refused a write (e.g.
            ``InventoryInUse``); the view still matches Placement.
        """
        root = _root_uuid(desired)
        if self._restored is not None:
            self._restore(desired, local)
        synced = self._synced
        if (
            synced is not None
            and not driver_allocations
            and synced.covers(desired, local, self._clock())
        ):
            return SyncResult(attempts=0, operations=(), tree=synced.tree, read=False)
        self._synced = None
        reported = desired
        computed_on = {}  # the view and tree of the last attempt's operations

        def attempt(number):
            cached = self._view
            desired = computed_on["desired"] = self._refresh(root, reported)
            ops = diffmod.diff(desired, self._view.tree)
            computed_on["view"] = self._view
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "Sync of tree %s, attempt %d: %s; %s",
                    root,
                    number,
                    describe.refresh_decision(cached.tree, self._view.tree),
                    f"{len(ops)} operation(s) to write" if ops else "nothing to write",
                )
            try:
                flushed = self._flusher.flush(
                    self._view, ops, desired, root, held, driver_allocations=driver_allocations
                )
            finally:
                # Kept on failure too: each write that was answered is real.
                self._view = self._flusher.view
            return SyncResult(
                attempts=number + flushed.retried,
                operations=tuple(ops),
                reshaped=flushed.moves,
                seeded=flushed.seeded,
                tree=desired,
            )

        def on_conflict(exc, number):
            # Nothing to forget by hand: the conflicting provider's generation
            # has moved, so the next listing makes the reader re-read it.
            LOG.info("Placement generation conflict on attempt %d, re-reading: %s", number, exc)

        try:
            result = self._policy.call(
                attempt,
                retry_on=(errors.GenerationConflict, errors.ProviderChanging),
                on_retry=on_conflict,
                exhausted=lambda exc, n: errors.SyncConflictsExhausted(root=root, attempts=n),
                sleep=self._sleep,
                rng=self._rng,
            )
        except errors.PlacementUnavailable:
            # A write may or may not have landed: trust nothing cached. A
            # failed read changed nothing in Placement: the view stays, and
            # the retry reads the listing alone (one request instead of
            # three per provider, which made every agent that met an outage
            # come back with a burst). _synced is None: the retry reads.
            # (A refused write (4xx) left Placement, and our view, as it was.)
            if self._flusher.outcome_unknown:
                self.invalidate()
            raise
        finally:
            self._flusher.clear_outcome()
        if result.operations:
            before = computed_on["view"].tree
            LOG.info(
                "Placement updated: %s",
                "; ".join(describe.describe(op, before) for op in result.operations),
            )
        kept = self._children.retire(self._view, computed_on["desired"], drop, self._flusher.send)
        if self._refresh_interval and not kept and not (result.reshaped or result.seeded):
            # A refused delete is tried again at the next sync, and a reshape
            # leaves providers to re-read: neither may wait for the interval.
            due = self._clock() + self._refresh_interval * (1.0 - 0.1 * self._rng())
            self._synced = _Synced(reported, local, computed_on["desired"], due)
            self._save_checkpoint()
        return result

    def _refresh(self, root, desired):
        """Read Placement into the view; :returns: the tree to sync."""
        self._view, desired = reader.refresh(
            self._client, self._view, root, desired, self._children.uuids
        )
        return desired

    def _restore(self, desired, local):
        """First sync after a restart: when the desired tree and ``local``
        are those of the last sync before it, trust the view it read and
        look at Placement at a random point of the refresh interval (so a
        fleet restarted at once reads as in steady state, not all at once).
        Otherwise sync as on a first start."""
        view, reported, known = self._restored
        self._restored = None
        if reported != checkpoint.digest(desired) or known != checkpoint.digest(local):
            LOG.info("The node changed since the last synced view: reading Placement now")
            return
        self._view = PlacementView(view)
        due = self._clock() + self._refresh_interval * self._rng()
        self._synced = _Synced(desired, local, desired, due)
        self._saved = None
        LOG.info(
            "Unchanged since the last sync before the restart: first read of Placement in %.0f s",
            due - self._clock(),
        )

    def _save_checkpoint(self):
        """Keep the last synced view for a restart; written only when it
        changed (a steady sync writes nothing)."""
        if self._checkpoint is None:
            return
        synced = self._synced
        # A tree synced under other children's UUIDs (reader.same_names) is
        # not the one asked for: a restart must then read.
        reported = synced.reported if synced.tree == synced.reported else None
        record = checkpoint.encode(self._view.tree, reported, synced.local)
        if record != self._saved:
            self._checkpoint.save(record)
            self._saved = record


def _load(record):
    """The checkpoint's (view, reported digest, local digest), or None."""
    found = record.load()
    return checkpoint.decode(found) if isinstance(found, dict) else None


def _root_uuid(tree):
    # The node's own root; a driver's sharing providers are roots beside it.
    roots = [p.uuid for p in tree if p.parent_uuid is None and not p.sharing]
    if len(roots) != 1:
        raise ValueError(f"a desired tree needs exactly one root, got {len(roots)}")
    return roots[0]
