# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Moves out of a node that nova gave up on without putting the books back
(docs/faults.md, "A move cut short at its source").

nova-compute killed at a move's source while the guest was leaving
(``resize_instance``, ``live_migration``) starts again and its
``init_host`` keeps the guest on the source: it resets the instance's
task state, and for a live migration it sets the migration to ``error``;
for a resize or cold migration it leaves the migration ``migrating``.
Neither gives the allocation the conductor moved to the migration back to
the instance: the source's resources stay held by the migration's
consumer, the destination's by the instance, and nova's tracker never
changes either (nova bug 1836369; ``nova-manage placement audit`` is the
operator's tool for it on stock nova).

The source's periodic settles such a move here, before the agent's moves
are reconciled: the migration's allocation goes back to the instance
(nova's own ``move_allocations``, as a revert does), and a move nova left
under way is set to ``error``; the agents then revert it at both ends like
any move that ended in error.

Only on the second sighting in a row: a move is settled when two periodic
audits of the node one after the other (``update_available_resource``;
the one at the service's start counts as the first) find the same
migration in the same abandoned state (same status, the instance on the
source with no task). A single sighting may be nova's own recovery still
under way (``init_host`` finishing the instance, an operator's reset of
its state, a revert whose steps have not all landed); a state that has
not moved over a whole period has no owner left. This is the rule rtagent
keeps for unknown consumers (two periodic audits, docs/troubleshooting.md),
and it leaves nova's behaviour intact for the span of one audit (nova's
own ``test_init_host`` asserts the books as ``init_host`` leaves them
right after the start).
"""

import logging
import threading

from nova import exception, objects
from nova.compute import vm_states

LOG = logging.getLogger(__name__)

# The statuses of a resize or cold migration while the source works on it;
# only the source's compute service moves them on.
_AT_SOURCE = frozenset({"pre-migrating", "migrating", "post-migrating"})
_DEPARTING = frozenset({"resize", "migration", "live-migration"})


class CutShort:
    """The sightings of moves cut short at this host's nodes, kept from one
    periodic audit to the next (the tracker holds one for the life of the
    compute service, so a restart starts with none)."""

    def __init__(self):
        # node UUID -> {migration UUID: status} seen at the last audit.
        self._seen = {}
        # node UUID -> migration UUIDs in error whose consumer holds
        # nothing (settled by nova or here): not looked at again.
        self._empty = {}
        self._mutex = threading.Lock()

    def settle(self, context, records, reportclient):
        """Put back the books of the moves out of ``records.cn`` that nova
        gave up on and that the previous audit saw so too. Makes Placement
        calls: call it without nova's lock held.

        :returns: the migration UUIDs settled. A Placement failure is
            logged and the move is tried again at the next audit.
        """
        node = records.cn.uuid
        with self._mutex:
            empty = self._empty.setdefault(node, set())
            # Forget what nova no longer lists (deleted with its instance).
            empty &= {m.uuid for m in records.moving}
            empty = frozenset(empty)
            before = self._seen.get(node, {})
        found = list(_abandoned(context, records, skip=empty))
        with self._mutex:
            self._seen[node] = {m.uuid: m.status for m, _ in found}
        settled = []
        for migration, instance in found:
            try:
                held = reportclient.get_allocations_for_consumer(context, migration.uuid)
            except Exception as exc:  # Placement's errors; the next audit again
                _not_now(migration, instance, exc)
                continue
            if not held and migration.status == "error":
                # Nothing to give back: nova settled it (a failed live
                # migration's rollback does), or this did. Not looked at
                # again while nova lists it.
                with self._mutex:
                    self._empty.setdefault(node, set()).add(migration.uuid)
                continue
            if before.get(migration.uuid) != migration.status:
                LOG.info(
                    "Move %s of instance %s looks cut short at its source %s (migration "
                    "%s, the instance back here with no task): settled at the next "
                    "audit if it still is",
                    migration.uuid,
                    instance.uuid,
                    records.cn.hypervisor_hostname,
                    migration.status,
                )
                continue
            try:
                _give_back(context, reportclient, migration, instance, held)
            except Exception as exc:  # Placement's errors; the next audit again
                _not_now(migration, instance, exc)
                continue
            if migration.status != "error":
                migration.status = "error"
                migration.save()
            with self._mutex:
                self._empty.setdefault(node, set()).add(migration.uuid)
            settled.append(migration.uuid)
        return settled


def _abandoned(context, records, skip):
    """(migration, instance) of each move out of ``records.cn`` in the
    state nova leaves a move cut short at its source, but those whose UUID
    is in ``skip``: read again, the instance first, so that a move that
    went on meanwhile shows it."""
    for listed in records.moving:
        if listed.uuid in skip or not _leaves(listed, records):
            continue
        instance = _instance(context, listed.instance_uuid)
        if instance is None or not _stayed(instance, records):
            continue
        migration = _migration(context, listed.uuid)
        if migration is None or not _leaves(migration, records):
            continue
        yield migration, instance


def _give_back(context, reportclient, migration, instance, held):
    """The migration's allocation (``held``, if any) moved back to the
    instance: the instance's own, at the destination, replaced by it."""
    if held:
        reportclient.move_allocations(context, migration.uuid, instance.uuid)
    LOG.warning(
        "Move %s of instance %s was cut short at its source (migration %s, the "
        "instance back here with no task, at two audits in a row): its allocation "
        "given back to the instance, the move set to error",
        migration.uuid,
        instance.uuid,
        migration.status,
    )


def _not_now(migration, instance, exc):
    LOG.warning(
        "Move %s of instance %s cut short at its source: its allocation "
        "could not be given back now: %s",
        migration.uuid,
        instance.uuid,
        exc,
    )


def _leaves(migration, records):
    """A move out of ``records.cn`` to another node that the source works
    on (a resize's) or that ended in error."""
    return (
        migration.migration_type in _DEPARTING
        and (migration.source_compute, migration.source_node)
        == (records.host, records.cn.hypervisor_hostname)
        and (migration.dest_compute, migration.dest_node)
        != (migration.source_compute, migration.source_node)
        and (
            migration.status == "error"
            or (migration.status in _AT_SOURCE and migration.migration_type != "live-migration")
        )
    )


def _stayed(instance, records):
    """The guest is on the source with nothing under way: nova gave up."""
    return (
        (instance.host, instance.node) == (records.host, records.cn.hypervisor_hostname)
        and instance.task_state is None
        and instance.vm_state != vm_states.RESIZED
    )


def _instance(context, instance_uuid):
    try:
        return objects.Instance.get_by_uuid(context, instance_uuid, expected_attrs=[])
    except exception.InstanceNotFound:
        return None


def _migration(context, migration_uuid):
    try:
        return objects.Migration.get_by_uuid(context, migration_uuid)
    except exception.MigrationNotFound:
        return None
