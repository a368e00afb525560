"""A node's accounting state as one immutable value, and what a change to it
must write to the store.

Every tracker operation is a pure function ``NodeState -> NodeState``
(:mod:`.claims`, :mod:`.moves`). The tracker computes the new state, writes
:func:`changes` in one transaction, and only then adopts it: an operation
that fails, or whose write fails, leaves nothing behind.
"""

import dataclasses
import types

from rtagent.resources import frozen_map
from rtagent.tracker import assigned, errors, ledger


@dataclasses.dataclass(frozen=True)
class NodeState:
    """Instances on the node and moves involving it; ``seq`` orders updates.

    ``released`` holds the UUIDs of instances that left this node (aborted,
    deleted, shelved-offloaded, moved away): the only consumers whose
    Placement allocations on this node's providers the agent may remove.
    An instance that comes back is no longer released.
    """

    node_uuid: str
    instances: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    migrations: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    seq: int = 0
    released: frozenset = frozenset()

    @classmethod
    def restore(cls, store, node_uuid):
        """The state of ``node_uuid`` as the store holds it."""
        migrations = store.load_migrations(node_uuid)
        return cls(
            node_uuid=node_uuid,
            instances=frozen_map({i.uuid: i for i in store.load_instances(node_uuid)}),
            migrations=frozen_map({m.uuid: m for m in migrations}),
            seq=max((m.seq for m in migrations), default=0),
            released=store.load_released(node_uuid),
        )

    def held(self):
        return ledger.holdings(self.node_uuid, self.instances, self.migrations.values())

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
        uuids = set(uuids)
        return dataclasses.replace(
            self,
            migrations=frozen_map({k: v for k, v in self.migrations.items() if k not in uuids}),
        )

    def migrations_of(self, instance_uuid):
        return [m for m in self.migrations.values() if m.instance_uuid == instance_uuid]


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
    offered: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))


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


@dataclasses.dataclass(frozen=True)
class Changes:
    """Rows to write so that the store holds the new state."""

    put_instances: tuple = ()
    delete_instances: tuple = ()
    put_migrations: tuple = ()
    delete_migrations: tuple = ()
    put_released: tuple = ()
    delete_released: tuple = ()

    def __bool__(self):
        return bool(
            self.put_instances
            or self.delete_instances
            or self.put_migrations
            or self.delete_migrations
            or self.put_released
            or self.delete_released
        )


def changes(old, new):
    """The store writes that turn ``old`` into ``new``."""
    return Changes(
        put_instances=tuple(
            i for u, i in sorted(new.instances.items()) if old.instances.get(u) != i
        ),
        delete_instances=tuple(sorted(set(old.instances) - set(new.instances))),
        put_migrations=tuple(
            m for u, m in sorted(new.migrations.items()) if old.migrations.get(u) != m
        ),
        delete_migrations=tuple(sorted(set(old.migrations) - set(new.migrations))),
        put_released=tuple(sorted(new.released - old.released)),
        delete_released=tuple(sorted(old.released - new.released)),
    )
