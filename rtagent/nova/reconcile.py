# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The periodic reconciliation of the agent's claims with nova's database.

nova's own tracker recomputed its usage from the database every period;
the agent keeps its claims, and this brings them back to what the database
says where the two could part: a move that ended while nobody told the
agent (the destination learns of a confirm through here), an instance nova
has on the node without a claim (a first start beside an existing
nova-compute adopts its instances this way), and a claim of an instance
nova deleted, offloaded or placed elsewhere (released; the agent then heals
its allocations on the node, as nova's tracker deleted them).
"""

import logging

from nova import exception, objects
from nova.compute import vm_states

from rtagent.nova.link import AgentRefused

LOG = logging.getLogger(__name__)

# Migration statuses after which the move is over.
_DONE = frozenset({"confirmed", "done", "completed"})
_UNDONE = frozenset({"reverted", "error", "failed", "cancelled"})


def reconcile(link, context, host, cn, claim):
    """Bring the agent's claims on ``cn`` to what nova's database says.

    :param claim: callable(context, instance, cn, limits) that claims an
        instance through the agent (raises AgentRefused).
    """
    status = link.call("get_status", node_uuid=cn.uuid)
    moving = set()
    for move in status.get("moves") or ():
        migration = _migration(context, move["migration_uuid"])
        state = migration.status if migration is not None else "error"
        if _live_migration_landed(context, migration):
            state = "completed"
        if state in _DONE or state == "finished":
            step(link, "finish_move", cn, move["migration_uuid"])
        if state in _DONE:
            step(link, "confirm_move", cn, move["migration_uuid"])
        elif state in _UNDONE:
            step(link, "revert_move", cn, move["migration_uuid"])
        else:
            moving.add(move["instance_uuid"])
    nodename = cn.hypervisor_hostname
    instances = objects.InstanceList.get_by_host_and_node(
        context, host, nodename, expected_attrs=["flavor"]
    )
    in_progress = objects.MigrationList.get_in_progress_and_error(context, host, nodename)
    moving |= {m.instance_uuid for m in in_progress if not _live_migration_landed(context, m)}
    here = {i.uuid for i in instances}
    for uuid in set(status.get("instance_uuids") or ()) - here - moving:
        if _gone_from(context, uuid, host, nodename):
            LOG.info("Instance %s is no longer on node %s: claim released", uuid, cn.uuid)
            release(link, cn, uuid)
    for instance in instances:
        if instance.uuid in moving or vm_states.allow_resource_removal(
            vm_state=instance.vm_state, task_state=instance.task_state
        ):
            continue
        try:
            claim(context, instance, cn, None)
        except AgentRefused as exc:
            LOG.error(
                "Instance %s is on node %s in nova's database but the agent refuses its claim: %s",
                instance.uuid,
                nodename,
                exc,
            )


def step(link, method, cn, migration_uuid):
    """A move step on ``cn``; :returns: True if the agent applied it."""
    try:
        result = link.call(method, migration_uuid=migration_uuid, node_uuid=cn.uuid)
    except AgentRefused as exc:
        LOG.warning("%s of %s on node %s refused: %s", method, migration_uuid, cn.uuid, exc)
        return False
    return bool((result or {}).get("applied"))


def release(link, cn, instance_uuid):
    """Release an instance's claim on ``cn`` (nothing if there is none)."""
    try:
        link.call("abort_instance_claim", node_uuid=cn.uuid, instance_uuid=instance_uuid)
    except AgentRefused as exc:
        LOG.warning("Releasing instance %s on %s: %s", instance_uuid, cn.uuid, exc)


def _migration(context, migration_uuid):
    try:
        return objects.Migration.get_by_uuid(context, migration_uuid)
    except exception.MigrationNotFound:
        return None


def _live_migration_landed(context, migration):
    """True for a live migration whose instance nova already records on
    the destination (``post_live_migration_at_destination`` ran): the
    guest runs there and the source frees it now, as nova's source does at
    the audit it runs then, before the migration's status says
    ``completed``."""
    if migration is None or not migration.is_live_migration:
        return False
    if migration.status in _DONE or migration.status in _UNDONE:
        return False
    try:
        instance = objects.Instance.get_by_uuid(context, migration.instance_uuid, expected_attrs=[])
    except exception.InstanceNotFound:
        return False
    return (instance.host, instance.node) == (migration.dest_compute, migration.dest_node)


def _gone_from(context, instance_uuid, host, nodename):
    """True if nova's database says the instance is not on ``host`` and
    ``nodename`` (deleted, offloaded, elsewhere, or unknown)."""
    try:
        instance = objects.Instance.get_by_uuid(
            context.elevated(read_deleted="yes"), instance_uuid, expected_attrs=[]
        )
    except exception.InstanceNotFound:
        return True
    if instance.deleted or vm_states.allow_resource_removal(
        vm_state=instance.vm_state, task_state=instance.task_state
    ):
        return True
    return (instance.host, instance.node) != (host, nodename)
