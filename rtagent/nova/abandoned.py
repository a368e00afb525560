# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Moves out of a node that nova gave up on without putting the books back
(docs/faults.md, "A move cut short at its source").

nova-compute killed at a move's source while the guest was leaving
(``resize_instance``, ``live_migration``) starts again and its
``init_host`` keeps the guest on the source: it resets the instance's
task state, and for a live migration it sets the migration to ``error``;
for a resize it leaves the migration ``migrating``. Neither moves the
allocation the conductor gave the migration back to the instance: the
source's resources stay held by the migration's consumer, the
destination's by the instance, and nova's tracker never changes either
(``nova-manage placement audit`` is the operator's tool for it).

The source's periodic settles such a move here, before the agent's moves
are reconciled: the migration's allocation goes back to the instance (nova's
own ``move_allocations``, as a revert does), and a move nova left
under way is set to ``error`` (as nova's own reset does for a live
migration); the agents then revert it at both ends like any move that
ended in error.
"""

import logging

from nova import exception, objects
from nova.compute import vm_states

LOG = logging.getLogger(__name__)

# The statuses of a resize or cold migration while the source works on it;
# only the source's compute service moves them on.
_AT_SOURCE = frozenset({"pre-migrating", "migrating", "post-migrating"})
_DEPARTING = frozenset({"resize", "migration", "live-migration"})


def settle(context, records, reportclient):
    """Put back the books of the moves out of ``records.cn`` that nova
    gave up on; :returns: the migration UUIDs settled. A failure (Placement
    down) is logged, and the next periodic tries again."""
    settled = []
    for listed in records.moving:
        if not _leaves(listed, records):
            continue
        if listed.status != "error" and listed.migration_type == "live-migration":
            # nova's own reset sets a live migration it gave up on to error.
            continue
        instance = _instance(context, listed.instance_uuid)
        if instance is None or not _stayed(instance, records):
            continue
        # Read after the instance: a move that went on meanwhile shows it here.
        migration = _migration(context, listed.uuid)
        if migration is None or not _leaves(migration, records):
            continue
        try:
            if not _give_back(context, reportclient, migration, instance):
                continue
        except Exception as exc:  # Placement's errors; the next periodic again
            LOG.warning(
                "Move %s of instance %s cut short at its source: its allocation "
                "could not be given back now: %s",
                migration.uuid,
                instance.uuid,
                exc,
            )
            continue
        if migration.status != "error":
            migration.status = "error"
            migration.save()
        settled.append(migration.uuid)
    return settled


def _give_back(context, reportclient, migration, instance):
    """The migration's allocation moved back to the instance; False when
    the migration holds none (nothing to give back)."""
    held = reportclient.get_allocations_for_consumer(context, migration.uuid)
    if not held and migration.status == "error":
        return False
    if held:
        reportclient.move_allocations(context, migration.uuid, instance.uuid)
    LOG.warning(
        "Move %s of instance %s was cut short at its source (migration %s, the "
        "instance back here with no task): its allocation given back to the "
        "instance, the move set to error",
        migration.uuid,
        instance.uuid,
        migration.status,
    )
    return True


def _leaves(migration, records):
    return (
        migration.migration_type in _DEPARTING
        and (migration.source_compute, migration.source_node)
        == (records.host, records.cn.hypervisor_hostname)
        and (migration.dest_compute, migration.dest_node)
        != (migration.source_compute, migration.source_node)
        and (migration.status == "error" or migration.status in _AT_SOURCE)
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
