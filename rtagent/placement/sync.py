"""Flush the desired provider tree to Placement, cheaply and safely.

Each sync reads the tree's providers and their generations in ONE request
(``GET /resource_providers?in_tree=ROOT``). A provider whose generation is the
one we last saw is unchanged, so its cached inventories and traits are
reused; only providers that moved are re-read. With nothing changed a sync
costs one read and no write, whatever the size of the node.

With a ``refresh_interval``, even that read is skipped while the desired
tree and the node's consumers are those of the last sync and the last read
is younger than the interval: every local change (a host or config change,
a claim, a move, a delete) still syncs at once, and only changes made by
someone else (an operator's ratio, a trait, an allocation written behind the
agent's back) wait for the next due read. This is kubelet's
split of its status report from its status computation; it takes the
steady cost per node from one read per audit to one per interval.

The diff is computed purely (:mod:`.diff`) and applied; the cached view is
updated only from Placement's answers to successful writes. A generation
conflict drops that provider from the cache, and the whole read-diff-write
is retried under one :class:`~rtagent.placement.retry.RetryPolicy`.

When Placement is unreachable the view is dropped only if a write was sent
and its answer lost (its outcome is unknown); a failed read leaves Placement
as it was, so the view is kept and the retry costs one listing, not a
re-read of every provider. With a ``checkpoint`` the view of the last sync
survives a restart (:mod:`.checkpoint`).
"""

import dataclasses
import json
import logging
import random
import time

from rtagent.exception import RtagentError
from rtagent.placement import changes, checkpoint, errors, reshape
from rtagent.placement import diff as diffmod
from rtagent.placement.retry import RetryPolicy
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map

LOG = logging.getLogger(__name__)

# Inventories and traits are read by two requests; if someone writes between
# them the generations differ and we read again, at most this many times.
_CONSISTENT_READ_ATTEMPTS = 3


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
    # under another UUID kept under theirs (:meth:`ProviderSync._same_names`).
    tree: object = None
    # False when the sync was skipped: nothing changed locally and the
    # last read of Placement is younger than the refresh interval.
    read: bool = True


@dataclasses.dataclass(frozen=True)
class _Synced:
    """The last successful sync: the tree it was asked for, the node's
    local marker then (its consumers), the tree it synced, and the
    monotonic time from which Placement must be read again to see other
    writers' changes."""

    reported: object
    local: object
    tree: object
    due: float


class RememberedChildren:
    """Where a sync keeps the child providers it published, across restarts:
    one key of a durable key-value store (the tracker store's metadata).

    :param get: callable(key) -> str or None.
    :param put: callable(key, str) that is durable on return.
    """

    def __init__(self, get, put, key):
        self._get = get
        self._put = put
        self._key = key

    def load(self):
        """The remembered UUIDs; none (logged) if the record is unreadable:
        then a child dropped while the agent was down stays in Placement,
        as it would with no memory at all."""
        raw = self._get(self._key)
        if not raw:
            return frozenset()
        try:
            found = json.loads(raw)
            if not isinstance(found, list) or not all(isinstance(u, str) for u in found):
                raise ValueError("not a list of UUIDs")
        except ValueError as exc:
            LOG.warning(
                "Ignoring the unreadable record %s of published child providers: %s", self._key, exc
            )
            return frozenset()
        return frozenset(found)

    def save(self, uuids):
        self._put(self._key, json.dumps(sorted(uuids)))


class _Forgotten:
    """Children remembered by the process alone (tests, tools)."""

    def load(self):
        return frozenset()

    def save(self, uuids):
        pass


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
        self._view = ProviderTree()
        # Custom traits and classes known to exist in Placement (created by
        # us or seen on a provider): each costs one PUT, once per process.
        self._custom = set()
        # Child providers this agent published: the only providers it ever
        # deletes, once a desired tree no longer has them (a driver stopped
        # reporting them), also when that happened while it was down.
        # Someone else's provider is never among them.
        self._remembered = children or _Forgotten()
        self._children = self._remembered.load()
        self._listed = {}
        # Set when a write was sent and no answer came: its outcome is
        # unknown, so the view may be wrong (see sync).
        self._outcome_unknown = False
        self._checkpoint = checkpoint
        # The record last written: an unchanged one is not written again.
        self._saved = None
        self._restored = None
        if checkpoint is not None and refresh_interval:
            self._restored = _load(checkpoint)

    @property
    def view(self):
        """The last-known Placement view (immutable)."""
        return self._view

    def invalidate(self, uuid=None):
        """Forget the cached view of ``uuid`` (all providers if None); the
        next sync reads Placement whatever the refresh interval."""
        self._view = ProviderTree() if uuid is None else self._view.without(uuid)
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
        return diffmod.diff(desired, self._view)

    def sync(self, desired, local=None, held=None, drop=frozenset()):
        """Make Placement hold ``desired``.

        :param local: any value that changes when the node changes in a way
            Placement should be looked at for even if the tree is the same
            (the node's consumers: a claim makes the scheduler's allocation
            appear, a delete makes one to heal); with a refresh interval, a
            sync with the same tree and ``local`` as the last one, within
            the interval, sends nothing.
        :param held: {consumer: {provider: {class: amount}}}: what the
            node's claims hold on the desired tree's providers by local
            accounting. Where a provider gains a class (PCI reporting turned
            on), the consumers that already hold some of it are given their
            allocations in the same ``POST /reshaper`` that adds it.
        :param drop: UUIDs of child providers whose allocations may be
            removed when the desired tree no longer has them (PCI reporting
            turned off): they are emptied by a reshape, then deleted. Any
            other retired provider with allocations on it is kept.

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
            and synced.reported == desired
            and synced.local == local
            and self._clock() < synced.due
        ):
            return SyncResult(attempts=0, operations=(), tree=synced.tree, read=False)
        self._synced = None
        reported = desired
        computed_on = {}  # the view and tree of the last attempt's operations

        def attempt(number):
            cached = self._view
            desired = computed_on["desired"] = self._refresh(root, reported)
            ops = diffmod.diff(desired, self._view)
            computed_on["view"] = self._view
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug(
                    "Sync of tree %s, attempt %d: %s; %s",
                    root,
                    number,
                    changes.refresh_decision(cached, self._view),
                    f"{len(ops)} operation(s) to write" if ops else "nothing to write",
                )
            found = reshape.moves(desired, self._view, ops)
            bodies = reshape.moved_allocations(self._client, found) if found else {}
            seeds = reshape.seeded(self._view, ops, held)
            if seeds:
                bodies = reshape.with_seeded(self._client, bodies, seeds, root)
                seeds = {c: a for c, a in seeds.items() if c in bodies}
            if bodies:
                touched = reshape.involved(found) | {rp for a in seeds.values() for rp in a}
                self._reshape(ops, touched, bodies, desired)
                retried = 0
                LOG.info(
                    "Reshaped provider tree: %s",
                    "; ".join(
                        [f"moved {m.resource_class} {m.source}->{m.dest}" for m in found]
                        + [f"added {seeds[c]} to consumer {c}" for c in sorted(seeds)]
                    ),
                )
            else:
                found, seeds = (), {}
                retried = self._apply_by_provider(root, ops, desired)
            return SyncResult(
                attempts=number + retried,
                operations=tuple(ops),
                reshaped=tuple(found),
                seeded=tuple(sorted(seeds)),
                tree=desired,
            )

        def on_conflict(exc, number):
            # Nothing to forget by hand: the conflicting provider's generation
            # has moved, so the next listing makes _refresh re-read it.
            LOG.info("Placement generation conflict on attempt %d, re-reading: %s", number, exc)

        def exhausted(exc, attempts):
            return errors.SyncConflictsExhausted(root=root, attempts=attempts)

        try:
            result = self._policy.call(
                attempt,
                retry_on=(errors.GenerationConflict, errors.ProviderChanging),
                on_retry=on_conflict,
                exhausted=exhausted,
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
            if self._outcome_unknown:
                self.invalidate()
            raise
        finally:
            self._outcome_unknown = False
        if result.operations:
            before = computed_on["view"]
            LOG.info(
                "Placement updated: %s",
                "; ".join(changes.describe(op, before) for op in result.operations),
            )
        kept = self._retire(computed_on["desired"], drop)
        if self._refresh_interval and not kept and not (result.reshaped or result.seeded):
            # A refused delete is tried again at the next sync, and a reshape
            # leaves providers to re-read: neither may wait for the interval.
            due = self._clock() + self._refresh_interval * (1.0 - 0.1 * self._rng())
            self._synced = _Synced(reported, local, computed_on["desired"], due)
            self._save_checkpoint()
        return result

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
        self._view = view
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
        # A tree synced under other children's UUIDs (_same_names) is not
        # the one asked for: a restart must then read.
        reported = synced.reported if synced.tree == synced.reported else None
        record = checkpoint.encode(self._view, reported, synced.local)
        if record != self._saved:
            self._checkpoint.save(record)
            self._saved = record

    def _same_names(self, desired):
        """``desired`` with each child provider this agent published before
        under its UUID in Placement, where the tree reports it under a new
        one: a provider name is unique in Placement, so the same name is the
        same provider (nova's virt drivers, handed a fresh provider tree,
        make up a UUID for each child). Allocations against it stay valid.
        """
        wanted = {p.uuid for p in desired}
        ours = {
            entry["name"]: uuid
            for uuid, entry in self._listed.items()
            if uuid in self._children and uuid not in wanted
        }
        same = {
            p.uuid: ours[p.name]
            for p in desired
            if p.parent_uuid is not None and p.uuid not in self._listed and p.name in ours
        }
        if not same:
            return desired
        LOG.debug("Child providers reported under new UUIDs, kept as in Placement: %s", same)
        return ProviderTree(
            p.replace(
                uuid=same.get(p.uuid, p.uuid), parent_uuid=same.get(p.parent_uuid, p.parent_uuid)
            )
            for p in desired
        )

    def _retire(self, desired, drop=frozenset()):
        """Delete the child providers an earlier desired tree had and this
        one has not, children before parents; those in ``drop`` are emptied
        of allocations first. A provider Placement refuses to delete
        (allocations still on it) is tried again next sync.

        :returns: the UUIDs of those kept that way."""
        wanted = {p.uuid for p in desired}
        retired = [u for u in self._children if u not in wanted and u in self._listed]
        self._empty([u for u in retired if u in drop])

        def depth(uuid):
            hops, parent = 0, self._listed[uuid].get("parent_provider_uuid")
            while parent in self._listed and hops < len(self._listed):
                hops, parent = hops + 1, self._listed[parent].get("parent_provider_uuid")
            return hops

        kept = set()
        for uuid in sorted(retired, key=depth, reverse=True):
            try:
                self._client.delete_provider(uuid)
            except errors.PlacementRequestFailed as exc:
                LOG.warning("Provider %s, no longer desired, not deleted: %s", uuid, exc)
                kept.add(uuid)
                continue
            LOG.info("Placement updated: deleted provider %s (no longer reported)", uuid)
            self._view = self._view.without(uuid)
        children = frozenset(p.uuid for p in desired if p.parent_uuid is not None) | kept
        if children != self._children:
            self._remember(children)
        self._children = children
        return kept

    def _empty(self, uuids):
        """Remove every allocation on ``uuids`` and their inventories, in
        one ``POST /reshaper``. A conflict or refusal is logged: the
        provider is then kept by the delete and tried again next sync."""
        bodies = reshape.emptied(self._client, uuids) if uuids else {}
        if not bodies:
            return
        payload = {
            uuid: {
                "resource_provider_generation": self._listed[uuid]["generation"],
                "inventories": {},
            }
            for uuid in uuids
        }
        try:
            self._write(self._client.reshape, payload, bodies)
        except (errors.GenerationConflict, errors.PlacementRequestFailed) as exc:
            LOG.warning("Allocations on providers %s not removed: %s", sorted(uuids), exc)
            return
        LOG.info(
            "Reshaped provider tree: removed the allocations of %d consumer(s) from "
            "provider(s) %s, no longer reported",
            len(bodies),
            ", ".join(sorted(uuids)),
        )

    def _published(self, uuid):
        children = self._children | {uuid}
        self._remember(children)
        self._children = children

    def _remember(self, children):
        # Written only when the set changes: a steady sync writes nothing.
        # A failed write loses only the memory of a child published since;
        # Placement is already right.
        try:
            self._remembered.save(children)
        except RtagentError as exc:
            LOG.warning("Child providers %s not remembered across a restart: %s", children, exc)

    def _apply_by_provider(self, root, ops, desired):
        """Apply ``ops`` provider by provider; :returns: conflicts retried.

        A generation conflict on one provider re-reads only that provider
        (inventories and traits, two GETs), re-diffs it and writes again,
        under the same retry policy. The window between our read and our
        write stays a few requests long, so the agent still gets through
        when others write to its providers several times a second.
        """
        retried = 0
        groups = {}
        for op in ops:
            groups.setdefault(op.uuid, []).append(op)
        for uuid, group in groups.items():

            def apply(number, uuid=uuid, group=group):
                nonlocal retried
                if number > 1:
                    retried += 1
                    cached = self._view.get(uuid)
                    fresh = self._read_provider(
                        {
                            "uuid": uuid,
                            "name": cached.name,
                            "parent_provider_uuid": cached.parent_uuid,
                        }
                    )
                    self._view = self._view.with_provider(fresh)
                    group = diffmod.diff(ProviderTree([desired.get(uuid)]), ProviderTree([fresh]))
                for op in group:
                    self._apply(op, desired)

            def on_conflict(exc, number, uuid=uuid):
                LOG.info("Generation conflict on provider %s (try %d), re-reading it", uuid, number)

            self._policy.call(
                apply,
                retry_on=(errors.GenerationConflict, errors.ProviderChanging),
                on_retry=on_conflict,
                exhausted=lambda exc, n: errors.SyncConflictsExhausted(root=root, attempts=n),
                sleep=self._sleep,
                rng=self._rng,
            )
        return retried

    def _refresh(self, root, desired):
        """Read the tree's listing and each provider whose generation moved.

        :returns: ``desired``, or the tree to sync in its place
            (:meth:`_same_names`).
        """
        view = []
        listing = self._client.list_tree(root)
        self._listed = {entry["uuid"]: entry for entry in listing}
        desired = self._same_names(desired)
        for entry in listing:
            uuid = entry["uuid"]
            if uuid not in desired:
                # In our tree but not ours (e.g. another service's child
                # provider): we never write to it, so we need no copy.
                continue
            cached = self._view.get(uuid)
            if cached is not None and cached.generation == entry["generation"]:
                view.append(
                    cached.replace(
                        name=entry["name"], parent_uuid=entry.get("parent_provider_uuid")
                    )
                )
            else:
                view.append(self._read_provider(entry))
        self._view = ProviderTree(view)
        return desired

    def _read_provider(self, entry):
        uuid = entry["uuid"]
        for _ in range(_CONSISTENT_READ_ATTEMPTS):
            inv_gen, inventories = self._client.get_inventories(uuid)
            trait_gen, traits = self._client.get_traits(uuid)
            if inv_gen == trait_gen:
                break
        else:
            # Someone keeps writing to it: let the retry policy pace us
            # rather than write on a torn read.
            raise errors.ProviderChanging(uuid=uuid)
        return Provider(
            uuid=uuid,
            name=entry["name"],
            parent_uuid=entry.get("parent_provider_uuid"),
            generation=inv_gen,
            inventories=frozen_map(
                {rc: Inventory.from_placement(d) for rc, d in inventories.items()}
            ),
            traits=traits,
        )

    def _apply(self, op, desired):
        view = self._view
        if isinstance(op, diffmod.CreateProvider):
            try:
                generation = self._write(
                    self._client.create_provider, op.uuid, op.name, op.parent_uuid
                )
            except errors.ProviderNameConflict as exc:
                raise errors.ProviderNameTaken(name=op.name, uuid=op.uuid) from exc
            provider = Provider(op.uuid, op.name, op.parent_uuid, generation)
            if op.parent_uuid is not None:
                # Remembered at once: should a later write of this sync fail,
                # the child is still known as ours (its name is taken now).
                self._published(op.uuid)
        else:
            current = view.get(op.uuid)
            if isinstance(op, diffmod.UpdateProvider):
                try:
                    generation = self._write(
                        self._client.update_provider, op.uuid, op.name, op.parent_uuid
                    )
                except errors.ProviderNameConflict as exc:
                    raise errors.ProviderNameTaken(name=op.name, uuid=op.uuid) from exc
                provider = current.replace(
                    name=op.name, parent_uuid=op.parent_uuid, generation=generation
                )
            elif isinstance(op, diffmod.SetInventories):
                self._ensure_custom(
                    set(op.inventories) - set(current.inventories),
                    self._client.ensure_resource_class,
                )
                generation = self._write(
                    self._client.put_inventories, op.uuid, current.generation, op.inventories
                )
                provider = current.replace(
                    generation=generation,
                    inventories=frozen_map(
                        {rc: Inventory.from_placement(d) for rc, d in op.inventories.items()}
                    ),
                )
            else:
                self._ensure_custom(op.traits - current.traits, self._client.ensure_trait)
                generation = self._write(
                    self._client.put_traits, op.uuid, current.generation, op.traits
                )
                provider = current.replace(generation=generation, traits=op.traits)
        self._view = view.with_provider(provider)

    def _reshape(self, ops, touched, bodies, desired):
        """Apply ``ops``, the ``touched`` providers' inventories and the new
        allocations (``bodies``) together through ``POST /reshaper``."""
        held = [op for op in ops if isinstance(op, diffmod.SetInventories) and op.uuid in touched]
        for op in ops:
            if op not in held:
                self._apply(op, desired)
        payload = {}
        for op in held:
            current = self._view.get(op.uuid)
            self._ensure_custom(
                set(op.inventories) - set(current.inventories),
                self._client.ensure_resource_class,
            )
            payload[op.uuid] = {
                "resource_provider_generation": current.generation,
                "inventories": op.inventories,
            }
        try:
            self._write(self._client.reshape, payload, bodies)
        finally:
            # Reshaper answers no generations: re-read those providers next.
            for uuid in touched:
                self._view = self._view.without(uuid)

    def _ensure_custom(self, names, create):
        """Create the custom names among ``names`` not known to exist."""
        for name in sorted(names):
            if name.startswith("CUSTOM_") and name not in self._custom:
                self._write(create, name)
                self._custom.add(name)

    def _write(self, call, *args):
        """``call(*args)``, one write to Placement; an answer lost on the way
        (PlacementUnavailable) leaves its outcome unknown."""
        try:
            return call(*args)
        except errors.PlacementUnavailable:
            self._outcome_unknown = True
            raise


def _load(record):
    """The checkpoint's (view, reported digest, local digest), or None."""
    found = record.load()
    return checkpoint.decode(found) if isinstance(found, dict) else None


def _root_uuid(tree):
    roots = [p.uuid for p in tree if p.parent_uuid is None]
    if len(roots) != 1:
        raise ValueError(f"a desired tree needs exactly one root, got {len(roots)}")
    return roots[0]


def _inventories(records):
    return frozen_map({rc: Inventory.from_placement(r) for rc, r in records.items()})
