"""A node's whole accounting state as one immutable value, and what readers
get of it (:func:`snapshot_of`, :func:`view_inputs`).

Every tracker operation is a pure function ``NodeState -> NodeState``
(:mod:`.claims`, :mod:`.moves`, and the ``with_*`` methods here). The
tracker computes the new state, writes its changes (:mod:`.writes`) in one
transaction,
and only then adopts it: an operation that fails, or whose write fails,
leaves nothing behind. Readers take the adopted value by reference, without
the tracker's lock, since nobody can change it.

Some fields are durable (rows and per-node metadata in the store), the
others are rebuilt after a restart from the host and the configuration.
"""

import dataclasses
import json
import math
import types

from rtagent import excerpt
from rtagent.numa import running_pins as numa_running_pins
from rtagent.numa import usage as numa_usage
from rtagent.pci import devices as pcidevs
from rtagent.pci import node as pci_node
from rtagent.resources import STANDARD_CLASSES, frozen_map
from rtagent.tracker import assigned, errors, fallback, ledger, pciholds, pooldisk, rows, stats
from rtagent.tracker.drift import Drift
from rtagent.tracker.model import NodeSnapshot
from rtagent.tracker.sums import InstanceSums
from rtagent.tracker.table import Table
from rtagent.tracker.writes import DISABLED_KEY, FAILED_BUILDS_KEY, RATIOS_KEY


def _empty():
    return frozen_map({})


def _table():
    return Table()


_NO_PCI_DEVICES = pcidevs.make_table()
_NO_PCI_FOUND = pci_node.Discovered()


@dataclasses.dataclass(frozen=True)
class NodeState:
    """Everything the tracker knows of one node.

    Durable:

    :param instances: instance UUID -> Instance living on the node.
    :param migrations: migration UUID -> Migration involving the node.
    :param seq: the last sequence number given to a move (orders moves).
    :param released: UUIDs of instances that left this node (aborted,
        deleted, shelved-offloaded, moved away): the only consumers whose
        Placement allocations on this node's providers the agent may remove.
        An instance that comes back (a claim, an incoming move) is no
        longer released.
    :param disabled: why the node is disabled, or None when enabled.
    :param placement_ratios: resource class -> the allocation ratio
        Placement last reported (used for classes whose ratio is not
        configured; kept so that a restart while Placement is down does not
        fall back to the initial ratios).
    :param failed_builds: consecutive failed builds (nova's stat).

    Rebuilt after a restart:

    :param host: the last HostView read, or None before the first audit.
    :param unavailable: why the hypervisor cannot be read now, or None.
    :param drift: the last :class:`~rtagent.tracker.drift.Drift`.
    :param offered: resource class -> identifiers the node offers.
    :param policy: the :class:`~rtagent.tracker.ledger.ResourcePolicy`.
    :param inventories: resource class -> Inventory claims are checked
        against (derived from host, policy and Placement's ratios).
    :param numa_cells: the host's NUMA cells as claims see them before any
        usage (derived from host and policy, see :mod:`rtagent.numa.usage`).
    :param numa_pins: domain UUID -> the dedicated CPUs that domain is
        pinned to (its ``<cputune>``), for every domain on the host pinned
        to any (derived from host and numa_cells, see
        :mod:`rtagent.numa.running_pins`).
    :param pci: the parsed ``[pci]`` options (a
        :class:`rtagent.conf.pci.PciConfig`), or None for none.
    :param pci_found: the :class:`~rtagent.pci.node.Discovered` devices of
        the last reading, before claims (derived from host and pci).
    :param pci_devices: the :class:`~rtagent.pci.devices.DeviceTable` of the
        host's devices that ``pci``'s device specs match, with the devices
        that claims hold (the instances' ``pci_devices``, the moves'
        ``old_pci``/``new_pci``, see :meth:`pci_holds`) and, marked
        allocated to it, those a domain holds without a claim (derived from
        pci_found and the claims, see :mod:`rtagent.pci.node`; rebuilt
        whenever a claim's devices change).
    :param pci_held: the :class:`~rtagent.pci.node.HeldWithoutClaim` values
        behind those marks: the node's PCI drift.
    :param pending: instance UUID -> token of a standalone claim whose
        Placement write is in flight; other calls on it are refused with a
        retriable error until its caller settles it.
    :param pool_usage: a :class:`~rtagent.tracker.pooldisk.PoolUsage`, what
        other consumers hold on the shared disk pool as Placement last
        said, or None (no shared pool, or not read yet).
    :param deleted: the released instances that were released as deleted
        (``update_instance`` with ``vm_state`` ``deleted``): gone for good,
        so healing removes their allocations at its first look instead of
        its second (see :mod:`rtagent.placement.passes.heal`). Not stored:
        after a restart they wait for a second look like the others.

    Derived, so that an operation costs the same whatever N: ``instances``
    and ``migrations`` are :class:`~rtagent.tracker.table.Table` values
    (any mapping given is copied into one), which tell :func:`changes`
    what an operation touched; ``sums`` are the instances' totals, carried
    from state to state (rebuilt when they are not those of ``instances``).
    """

    node_uuid: str
    instances: Table = dataclasses.field(default_factory=_table)
    migrations: Table = dataclasses.field(default_factory=_table)
    seq: int = 0
    released: frozenset = frozenset()
    deleted: frozenset = frozenset()
    disabled: str | None = None
    placement_ratios: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    failed_builds: int = 0
    host: object = None
    unavailable: str | None = None
    drift: Drift = dataclasses.field(default_factory=Drift)
    offered: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    policy: ledger.ResourcePolicy = dataclasses.field(default_factory=ledger.ResourcePolicy)
    inventories: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    numa_cells: tuple = ()
    numa_pins: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    pci: object = None
    pci_found: pci_node.Discovered = _NO_PCI_FOUND
    pci_devices: pcidevs.DeviceTable = _NO_PCI_DEVICES
    pci_held: tuple = ()
    pending: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    pool_usage: pooldisk.PoolUsage | None = None
    sums: InstanceSums | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        # O(1) when built by the methods below; O(N), once, for a state
        # built from plain mappings (a restore, a test).
        for name in ("instances", "migrations"):
            value = getattr(self, name)
            if not isinstance(value, Table):
                object.__setattr__(self, name, Table(value))
        if self.sums is None or not self.sums.valid_for(self.instances):
            object.__setattr__(self, "sums", InstanceSums.over(self.instances))

    @classmethod
    def restore(cls, store, node_uuid, policy, pci=None):
        """The state of ``node_uuid`` as the store holds it; ``pci`` is the
        parsed ``[pci]`` options, as ``policy`` is the policy.

        :raises StateError: a row or a metadata value is unreadable.
        """
        migrations = store.load_migrations(node_uuid)
        ratios = store.get_meta(RATIOS_KEY.format(node=node_uuid))
        failed = store.get_meta(FAILED_BUILDS_KEY.format(node=node_uuid))
        try:
            ratios = frozen_map({rc: float(r) for rc, r in json.loads(ratios or "{}").items()})
            failed = int(failed or 0)
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise errors.StateError(
                path=store.path, reason=f"unreadable metadata: {excerpt.clip(str(exc), 200)}"
            ) from exc
        _check_meta(store.path, node_uuid, ratios, failed)
        state = cls(
            node_uuid=node_uuid,
            instances=Table((i.uuid, i) for i in store.load_instances(node_uuid)),
            migrations=Table((m.uuid, m) for m in migrations),
            seq=max((m.seq for m in migrations), default=0),
            released=store.load_released(node_uuid),
            disabled=store.get_meta(DISABLED_KEY.format(node=node_uuid)),
            placement_ratios=ratios,
            failed_builds=failed,
            policy=policy,
            pci=pci,
        )
        reason = rows.double_holdings(state)
        if reason is not None:
            raise errors.StateError(
                path=store.path, reason=f"node {node_uuid}: {reason}. {rows.ROWS_HELP}"
            )
        return state

    def replace(self, **fields):
        """This state with ``fields`` changed: what ``dataclasses.replace``
        gives, without its generic walk over every field and its keyword
        __init__ (about 20 us per new state against 4 here: a sixth of a
        claim's own work at N = 0, where each operation makes new states).
        Every field is an init field with no InitVar, so __init__ only
        stores each value and runs :meth:`__post_init__`; this stores the
        same values and runs it too (tests/unit/test_claim_path.py).

        :raises TypeError: a name that is not a field.
        """
        unknown = fields.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"NodeState has no field(s) {sorted(unknown)}")
        new = object.__new__(NodeState)
        values = new.__dict__
        values.update(self.__dict__)
        values.update(fields)
        new.__post_init__()
        return new

    # -- accounting ------------------------------------------------------

    def held(self):
        return ledger.holdings(self.node_uuid, self.instances, self.migrations.values())

    def used(self, extra=()):
        """Resource class -> amount held, as ``ledger.usage(self.held(),
        extra)`` counts it (a class may also show with 0), from the carried
        sums: O(moves + extra), not O(instances)."""
        replacing, others = ledger.move_holdings(
            self.node_uuid, self.instances, self.migrations.values()
        )
        used = dict.fromkeys(STANDARD_CLASSES, 0)
        for rc, amount in self.sums.amounts.items():
            used[rc] = used.get(rc, 0) + amount
        for uuid in replacing:
            for rc, amount in self.instances[uuid].resources.items():
                used[rc] -= amount
        for resources in [r for r, _ in replacing.values()] + [r for r, _ in others] + list(extra):
            for rc, amount in resources.items():
                used[rc] = used.get(rc, 0) + amount
        return used

    def ids_in_use(self):
        """Resource class -> identifiers held, as ``assigned.in_use(self.held())``."""
        replacing, others = ledger.move_holdings(
            self.node_uuid, self.instances, self.migrations.values()
        )
        ids = self.sums.ids_in_use()
        for _, held in list(replacing.values()) + others:
            for rc, idents in held.items():
                ids.setdefault(rc, set()).update(idents)
        return ids

    def pool_others(self):
        """What other hosts' consumers hold on the shared disk pool, as
        extra usage (``()`` without one)."""
        return pooldisk.others(self.host, self.pool_usage)

    def with_inputs(self, **fields):
        """Replace host, policy, PCI options or Placement ratios and
        re-derive what claims are checked against: inventories, NUMA cells,
        PCI devices."""
        state = self.replace(**fields)
        if state.host is None:
            return state
        pins_on_shared = ledger.pins_on_shared(state.host, state.policy)
        cells = numa_usage.host_cells(
            state.host.numa_cells,
            state.host.cpu_shared_set,
            state.host.cpu_dedicated_set,
            state.policy.reserved_huge_pages,
            state.host.online_cpus,
            fallback=pins_on_shared,
        )
        if state.host.cpu_dedicated_set and fallback.left(self, state):
            state = fallback.pinned_as_pcpu(state)
        return state.replace(
            **self._pci_fields(state),
            inventories=pooldisk.with_pool(
                frozen_map(ledger.inventories(state.host, state.policy, state.placement_ratios)),
                state.host,
                state.policy,
                state.pool_usage,
            ),
            numa_cells=cells,
            numa_pins=self._numa_pins(state.host, cells),
        )

    def _numa_pins(self, host, cells):
        """See ``numa_pins``; this state's when the domains and cells are
        the very same (the driver reuses its domain tuple while nothing
        changed, so a steady reading does not look at every domain)."""
        if self.host is not None and self.host.domains is host.domains and self.numa_cells == cells:
            return self.numa_pins
        return frozen_map(numa_running_pins.pinned_dedicated(host.domains, cells))

    def numa_kept(self, instance_uuid):
        """The host CPUs the claims of ``instance_uuid`` keep on this node:
        its own and its moves' (O(moves))."""
        kept = set()
        instance = self.instances.get(instance_uuid)
        if instance is not None and instance.numa is not None:
            kept |= instance.numa.pinned
        for move in self.migrations_of(instance_uuid):
            for claim in (move.old_numa, move.new_numa):
                if claim is not None:
                    kept |= claim.pinned
        return frozenset(kept)

    def numa_unclaimed(self):
        """{domain UUID: dedicated CPUs it is pinned to that no claim of
        its own keeps} (see :mod:`rtagent.numa.running_pins`; O(pinned domains))."""
        return numa_running_pins.unclaimed(self.numa_pins, self.numa_kept)

    def _pci_fields(self, state):
        """``state``'s PCI devices and drift; those of ``self`` when their
        inputs are the very same (the driver reuses its tuples while nothing
        changed, so a ratio change or a steady reading costs nothing; the
        claims do not change here)."""
        old, new = self.host, state.host
        if (
            old is not None
            and old.pci_devices is new.pci_devices
            and old.domains is new.domains
            and self.pci is state.pci
        ):
            return {
                "pci_found": self.pci_found,
                "pci_devices": self.pci_devices,
                "pci_held": self.pci_held,
            }
        specs = state.pci.device_specs if state.pci is not None else ()
        found = pci_node.discover(new, specs)
        table, held = pci_node.with_claims(found, state.pci_holds())
        return {"pci_found": found, "pci_devices": table, "pci_held": held}

    def pci_holds(self):
        """See :func:`rtagent.tracker.pciholds.holds`."""
        return pciholds.holds(self)

    def _with_pci_claims(self):
        """This state with its device table rebuilt from the reading and
        the claims' holds (after a claim's devices changed)."""
        if self.host is None:
            return self  # rebuilt at the first reading
        table, held = pci_node.with_claims(self.pci_found, self.pci_holds())
        return self.replace(pci_devices=table, pci_held=held)

    def numa_held(self):
        """(consumer, NumaClaim) for every NUMA claim the node holds, as
        :func:`~rtagent.tracker.ledger.holdings` counts flavors: an instance
        here holds its own; a same-node resize holds the old and the new
        topology; an incoming move the new one, an outgoing move that has
        left the old one. O(instances): read only for NUMA claims and
        snapshots."""
        held, replaced = [], set()
        for move in ledger.latest_migrations(self.migrations.values()).values():
            instance = self.instances.get(move.instance_uuid)
            if instance is not None and not move.same_node:
                continue
            if move.same_node:
                replaced.add(move.instance_uuid)
                pairs = (move.old_numa, move.new_numa)
            elif move.dest_node == self.node_uuid:
                pairs = (move.new_numa,)
            else:
                pairs = (move.old_numa,)
            held.extend((move.instance_uuid, c) for c in pairs if c is not None)
        if self.sums.numa.cells:  # else no instance has a NUMA claim: skip O(N)
            held.extend(
                (i.uuid, i.numa)
                for i in self.instances.values()
                if i.numa is not None and i.uuid not in replaced
            )
        return held

    def numa_usage(self):
        """The node's NUMA cells with the usage of every claim held here, as
        :meth:`numa_held` counts them, from the carried sums: O(moves), not
        O(instances)."""
        return self.sums.numa.changed(added=self._numa_of_moves()).apply(self.numa_cells)

    def _numa_of_moves(self):
        """The NUMA claims moves add to the instances' own (see
        :meth:`numa_held`): with a same-node resize the instance counts its
        current topology and the move the other one."""
        extra = []
        for move in ledger.latest_migrations(self.migrations.values()).values():
            instance = self.instances.get(move.instance_uuid)
            if instance is not None:
                if move.same_node:
                    current_is_old = instance.numa == move.old_numa
                    extra.append(move.new_numa if current_is_old else move.old_numa)
                continue
            if move.same_node:
                extra.extend((move.old_numa, move.new_numa))
            elif move.dest_node == self.node_uuid:
                extra.append(move.new_numa)
            else:
                extra.append(move.old_numa)
        return [c for c in extra if c is not None]

    # -- consumers -------------------------------------------------------

    def active_consumers(self):
        """Consumers whose allocations this node relies on now: instances
        living here, instances of moves to or from here, and the moves
        themselves (nova's migration consumer holds the source's usage)."""
        moving = set()
        for move in self.migrations.values():
            moving.add(move.uuid)
            moving.add(move.instance_uuid)
        return frozenset(self.instances) | moving

    def known_consumers(self):
        """Every consumer this node accounts for: the active ones and the
        released ones not yet healed. Anything else on our providers is
        unknown (reported, never touched)."""
        return self.active_consumers() | self.released

    def healable(self):
        """Released consumers that are not active again: the only ones whose
        allocations healing may remove."""
        return self.released - self.active_consumers()

    # -- instances and moves ---------------------------------------------

    def with_instance(self, instance):
        instances = self.instances.set(instance.uuid, instance)
        released = self.released
        if instance.uuid in released:
            released = released - {instance.uuid}
        old = self.instances.get(instance.uuid)
        state = self.replace(
            instances=instances,
            sums=self.sums.changed(instances, old, instance),
            released=released,
            deleted=self.deleted - {instance.uuid} if self.deleted else self.deleted,
        )
        old_pci = old.pci_devices if old is not None else ()
        return state._with_pci_claims() if old_pci != instance.pci_devices else state

    def without_instance(self, uuid, deleted=False):
        """:param deleted: the instance is deleted for good (see ``deleted``)."""
        if uuid not in self.instances:
            return self
        instances = self.instances.without([uuid])
        removed = self.instances[uuid]
        state = self.replace(
            instances=instances,
            sums=self.sums.changed(instances, removed=removed),
            released=self.released | {uuid},
            deleted=self.deleted | {uuid} if deleted else self.deleted,
        )
        return state._with_pci_claims() if removed.pci_devices else state

    def forget_released(self, uuids):
        return self.replace(released=self.released - set(uuids), deleted=self.deleted - set(uuids))

    def with_migration(self, migration):
        """Add or update ``migration``, stamping it with the next sequence."""
        seq = self.seq + 1
        migration = migration.replace(seq=seq)
        state = self.replace(
            migrations=self.migrations.set(migration.uuid, migration),
            seq=seq,
        )
        # The latest move of an instance is the one that counts: its other
        # moves' devices may stop counting too.
        moves = (migration, *self.migrations_of(migration.instance_uuid))
        return state._with_pci_claims() if pciholds.any_held(moves) else state

    def without_migrations(self, uuids):
        """Drop these moves. An incoming move that ends without its instance
        living here (reverted, dropped as stale, superseded before it
        finished) leaves an allocation here that nothing holds: the instance
        is released again, so that healing can remove it."""
        uuids = set(uuids)
        gone = [self.migrations[u] for u in uuids if u in self.migrations]
        back = {
            m.instance_uuid
            for m in gone
            if m.dest_node == self.node_uuid
            and not m.same_node
            and m.instance_uuid not in self.instances
        }
        state = self.replace(
            migrations=self.migrations.without(uuids),
            released=self.released | back,
        )
        # The moves left of those instances may count again (see pci_holds).
        moved = {g.instance_uuid for g in gone}
        left = [m for m in state.migrations.values() if m.instance_uuid in moved]
        return state._with_pci_claims() if pciholds.any_held(gone + left) else state

    def migrations_of(self, instance_uuid):
        return [m for m in self.migrations.values() if m.instance_uuid == instance_uuid]

    # -- standalone claims in flight ---------------------------------------

    def check_not_pending(self, instance_uuid, token=None):
        """:raises ClaimPending: a standalone claim of the instance is in
        flight and ``token`` is not the one its caller holds."""
        held = self.pending.get(instance_uuid)
        if held is not None and held != token:
            raise errors.ClaimPending(instance_uuid=instance_uuid, node=self.node_uuid)

    def with_pending(self, instance_uuid, token):
        return self.replace(pending=frozen_map({**self.pending, instance_uuid: token}))

    def without_pending(self, instance_uuid):
        return self.replace(
            pending=frozen_map({k: v for k, v in self.pending.items() if k != instance_uuid}),
        )


# The fields NodeState.replace accepts.
_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(NodeState))


def _check_meta(path, node_uuid, ratios, failed):
    """:raises StateError: a stored ratio or count no agent could write."""
    for rc, ratio in ratios.items():
        if not (math.isfinite(ratio) and 0 <= ratio <= _MAX_RATIO):
            raise errors.StateError(
                path=path,
                reason=f"node {node_uuid}: the allocation ratio of {excerpt.clip(rc, 80)} "
                f"Placement last reported is {ratio}, not a number from 0 to {_MAX_RATIO:g}",
            )
    if not 0 <= failed < 2**31:
        raise errors.StateError(
            path=path,
            reason=f"node {node_uuid}: the failed build count {excerpt.excerpt(failed)} "
            "is not an integer from 0 to 2147483647",
        )


# The largest ratio Placement stores (a 32-bit float).
_MAX_RATIO = 3.4e38


def snapshot_of(state, count_untracked):
    """The :class:`~rtagent.tracker.model.NodeSnapshot` readers get of
    ``state``: sorted, with usage and stats computed (pure)."""
    instances = tuple(state.instances[u] for u in sorted(state.instances))
    healable = state.healable()
    held = state.held()
    extra = state.drift.untracked_usage() if count_untracked else ()
    return NodeSnapshot(
        node_uuid=state.node_uuid,
        host=state.host,
        inventories=state.inventories,
        # Other hosts' allocations on a shared pool are used, not untracked.
        usage=frozen_map(ledger.usage(held, tuple(extra) + state.pool_others())),
        pool_usage=state.pool_usage,
        instances=instances,
        policy=state.policy,
        migrations=tuple(state.migrations[u] for u in sorted(state.migrations)),
        stats=frozen_map(stats.stats(instances, state.failed_builds)),
        drift=state.drift,
        assigned_missing=frozen_map(assigned.missing(state.offered, held))
        if state.offered
        else frozen_map({}),
        unavailable=state.unavailable,
        untracked_usage=frozen_map(ledger.usage([], extra)),
        released=state.released,
        disabled=state.disabled,
        known_consumers=state.known_consumers(),
        healable=healable,
        deleted=state.deleted & healable,
        pending=frozenset(state.pending),
        pci_devices=state.pci_devices,
        pci_held=state.pci_held,
        **_numa_fields(state),
    )


@dataclasses.dataclass(frozen=True)
class ViewInputs:
    """What the compute-node view reads of a node (:func:`view_inputs`),
    the fields a :class:`~rtagent.tracker.model.NodeSnapshot` has of the
    same names."""

    node_uuid: str
    host: object
    policy: object
    inventories: object
    usage: object
    running_vms: int
    stats: object
    numa_cells: tuple
    pci_devices: object

    @property
    def hypervisor_hostname(self):
        return self.host.hypervisor_hostname if self.host else None


def view_inputs(state, count_untracked):
    """The compute-node view's inputs of ``state``, from the sums the state
    carries: O(moves), not O(instances), so that the view nova's tracker
    writes after every claim does not make filling a node quadratic. Equal
    to the same fields of :func:`snapshot_of` (tests/unit/test_node_view.py
    checks it)."""
    extra = state.drift.untracked_usage() if count_untracked else ()
    return ViewInputs(
        node_uuid=state.node_uuid,
        host=state.host,
        policy=state.policy,
        inventories=state.inventories,
        usage=frozen_map(state.used(extra)),
        running_vms=len(state.instances),
        stats=frozen_map(stats.from_counts(state.sums.stats, state.failed_builds)),
        numa_cells=state.numa_usage() if state.numa_cells else (),
        pci_devices=state.pci_devices,
    )


def _numa_fields(state):
    held = state.numa_held()
    if not state.numa_cells and not held:
        return {}
    return {
        "numa_cells": state.numa_usage(),
        "numa_lost": frozen_map(numa_usage.lost_cpus(state.numa_cells, held)),
        "numa_claims": tuple(sorted(held, key=lambda pair: pair[0])),
        "numa_unclaimed": frozen_map(state.numa_unclaimed()),
    }
