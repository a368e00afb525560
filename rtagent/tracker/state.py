"""A node's whole accounting state as one immutable value, and what a change
to it must write to the store.

Every tracker operation is a pure function ``NodeState -> NodeState``
(:mod:`.claims`, :mod:`.moves`, and the ``with_*`` methods here). The
tracker computes the new state, writes :func:`changes` in one transaction,
and only then adopts it: an operation that fails, or whose write fails,
leaves nothing behind. Readers take the adopted value by reference, without
the tracker's lock, since nobody can change it.

Some fields are durable (rows and per-node metadata in the store), the
others are rebuilt after a restart from the host and the configuration.
"""

import dataclasses
import json
import types

from rtagent.resources import frozen_map
from rtagent.tracker import assigned, errors, ledger, stats
from rtagent.tracker.drift import Drift
from rtagent.tracker.model import NodeSnapshot

# Per-node metadata keys in the store (names kept from schema version 1).
RATIOS_KEY = "placement_ratios:{node}"
DISABLED_KEY = "disabled:{node}"
FAILED_BUILDS_KEY = "failed_builds:{node}"


def _empty():
    return frozen_map({})


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
    :param pending: instance UUID -> token of a standalone claim whose
        Placement write is in flight; other calls on it are refused with a
        retriable error until its caller settles it.
    """

    node_uuid: str
    instances: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    migrations: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    seq: int = 0
    released: frozenset = frozenset()
    disabled: str | None = None
    placement_ratios: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    failed_builds: int = 0
    host: object = None
    unavailable: str | None = None
    drift: Drift = dataclasses.field(default_factory=Drift)
    offered: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    policy: ledger.ResourcePolicy = dataclasses.field(default_factory=ledger.ResourcePolicy)
    inventories: types.MappingProxyType = dataclasses.field(default_factory=_empty)
    pending: types.MappingProxyType = dataclasses.field(default_factory=_empty)

    @classmethod
    def restore(cls, store, node_uuid, policy):
        """The state of ``node_uuid`` as the store holds it.

        :raises StateError: a row or a metadata value is unreadable.
        """
        migrations = store.load_migrations(node_uuid)
        ratios = store.get_meta(RATIOS_KEY.format(node=node_uuid))
        failed = store.get_meta(FAILED_BUILDS_KEY.format(node=node_uuid))
        try:
            ratios = frozen_map({rc: float(r) for rc, r in json.loads(ratios or "{}").items()})
            failed = int(failed or 0)
        except (ValueError, TypeError, AttributeError) as exc:
            raise errors.StateError(path=store.path, reason=f"unreadable metadata: {exc}") from exc
        return cls(
            node_uuid=node_uuid,
            instances=frozen_map({i.uuid: i for i in store.load_instances(node_uuid)}),
            migrations=frozen_map({m.uuid: m for m in migrations}),
            seq=max((m.seq for m in migrations), default=0),
            released=store.load_released(node_uuid),
            disabled=store.get_meta(DISABLED_KEY.format(node=node_uuid)),
            placement_ratios=ratios,
            failed_builds=failed,
            policy=policy,
        )

    def replace(self, **fields):
        return dataclasses.replace(self, **fields)

    # -- accounting ------------------------------------------------------

    def held(self):
        return ledger.holdings(self.node_uuid, self.instances, self.migrations.values())

    def with_inputs(self, **fields):
        """Replace host, policy or Placement ratios and re-derive the
        inventories claims are checked against."""
        state = dataclasses.replace(self, **fields)
        if state.host is None:
            return state
        return dataclasses.replace(
            state,
            inventories=frozen_map(
                ledger.inventories(state.host, state.policy, state.placement_ratios)
            ),
        )

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
        return dataclasses.replace(
            self,
            instances=frozen_map({**self.instances, instance.uuid: instance}),
            released=self.released - {instance.uuid},
        )

    def without_instance(self, uuid):
        if uuid not in self.instances:
            return self
        return dataclasses.replace(
            self,
            instances=frozen_map({k: v for k, v in self.instances.items() if k != uuid}),
            released=self.released | {uuid},
        )

    def forget_released(self, uuids):
        return dataclasses.replace(self, released=self.released - set(uuids))

    def with_migration(self, migration):
        """Add or update ``migration``, stamping it with the next sequence."""
        seq = self.seq + 1
        migration = migration.replace(seq=seq)
        return dataclasses.replace(
            self,
            migrations=frozen_map({**self.migrations, migration.uuid: migration}),
            seq=seq,
        )

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
        return dataclasses.replace(
            self,
            migrations=frozen_map({k: v for k, v in self.migrations.items() if k not in uuids}),
            released=self.released | back,
        )

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
        return dataclasses.replace(self, pending=frozen_map({**self.pending, instance_uuid: token}))

    def without_pending(self, instance_uuid):
        return dataclasses.replace(
            self,
            pending=frozen_map({k: v for k, v in self.pending.items() if k != instance_uuid}),
        )


@dataclasses.dataclass(frozen=True)
class FitContext:
    """What a claim is checked against, besides the state's own holdings.

    :param inventories: resource class -> Inventory (ratios resolved).
    :param extra_usage: resource mappings used outside any claim (untracked
        domains, when counted).
    :param offered: resource class -> identifiers the node offers.
    """

    inventories: types.MappingProxyType
    extra_usage: tuple = ()
    offered: types.MappingProxyType = dataclasses.field(default_factory=_empty)


def fit_context(state, count_untracked):
    """The :class:`FitContext` claims on ``state`` are checked against.

    :raises NodeNotReady: the host was never read.
    :raises HostUnavailable: the hypervisor cannot be read now.
    """
    if state.host is None:
        raise errors.NodeNotReady(node=state.node_uuid)
    if state.unavailable is not None:
        raise errors.HostUnavailable(node=state.node_uuid, reason=state.unavailable)
    extra = tuple(state.drift.untracked_usage()) if count_untracked else ()
    return FitContext(inventories=state.inventories, extra_usage=extra, offered=state.offered)


def ensure_fits(state, ctx, requested, *, limits, instance_uuid, assigned_request=None):
    """Check ``requested`` against the state's usage; pick assigned units.

    :returns: {rc: identifiers} chosen for ``assigned_request``.
    :raises ComputeResourcesUnavailable: it does not fit.
    """
    held = state.held()
    used = ledger.usage(held, ctx.extra_usage)
    reasons = ledger.refusals(ctx.inventories, used, requested, limits)
    if reasons:
        raise errors.ComputeResourcesUnavailable(instance_uuid, reasons)
    return assigned.pick(ctx.offered, held, assigned_request, instance_uuid)


def snapshot_of(state, count_untracked):
    """The :class:`~rtagent.tracker.model.NodeSnapshot` readers get of
    ``state``: sorted, with usage and stats computed (pure)."""
    instances = tuple(state.instances[u] for u in sorted(state.instances))
    held = state.held()
    extra = state.drift.untracked_usage() if count_untracked else ()
    return NodeSnapshot(
        node_uuid=state.node_uuid,
        host=state.host,
        inventories=state.inventories,
        usage=frozen_map(ledger.usage(held, extra)),
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
        healable=state.healable(),
        pending=frozenset(state.pending),
    )


@dataclasses.dataclass(frozen=True)
class Changes:
    """Rows to write so that the store holds the new state."""

    put_instances: tuple = ()
    delete_instances: tuple = ()
    put_migrations: tuple = ()
    delete_migrations: tuple = ()
    put_released: tuple = ()
    delete_released: tuple = ()
    # (key, value) pairs of per-node metadata; a value of None deletes the key.
    meta: tuple = ()

    def __bool__(self):
        return bool(
            self.put_instances
            or self.delete_instances
            or self.put_migrations
            or self.delete_migrations
            or self.put_released
            or self.delete_released
            or self.meta
        )


def changes(old, new):
    """The store writes that turn ``old`` into ``new`` (durable fields only)."""
    return Changes(
        put_instances=_put(old.instances, new.instances),
        delete_instances=tuple(sorted(set(old.instances) - set(new.instances))),
        put_migrations=_put(old.migrations, new.migrations),
        delete_migrations=tuple(sorted(set(old.migrations) - set(new.migrations))),
        put_released=tuple(sorted(new.released - old.released)),
        delete_released=tuple(sorted(old.released - new.released)),
        meta=_meta_changes(old, new),
    )


def _put(old, new):
    if old is new:
        return ()
    return tuple(v for k, v in sorted(new.items()) if old.get(k) != v)


def _meta_changes(old, new):
    node = new.node_uuid
    meta = []
    if old.disabled != new.disabled:
        meta.append((DISABLED_KEY.format(node=node), new.disabled))
    if dict(old.placement_ratios) != dict(new.placement_ratios):
        meta.append(
            (
                RATIOS_KEY.format(node=node),
                json.dumps(dict(new.placement_ratios), sort_keys=True),
            )
        )
    if old.failed_builds != new.failed_builds:
        meta.append((FAILED_BUILDS_KEY.format(node=node), str(new.failed_builds)))
    return tuple(meta)
