# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The periodic reconciliation of the agent's claims with nova's database.

nova's own tracker recomputed its usage from the database every period;
the agent keeps its claims, and this brings them back to what the database
says where the two could part: a move that ended while nobody told the
agent (the destination learns of a confirm through here), an instance nova
has on the node without a claim (a first start beside an existing
nova-compute adopts its instances this way), a move out of the node the
agent was not told of, and a claim of an instance nova deleted, offloaded
or placed elsewhere (released; the agent then heals its allocations on the
node, as nova's tracker deleted them). nova's tracker also recounted its
scheduler stats from the instances' states at every periodic: the
states of an instance the agent holds are sent again here when they
differ from the agent's (``get_status``'s ``instance_states``), one call
per changed instance and none for the others.

A move out of the node is recorded here, at the source's first periodic
after it starts, as nova's own source tracker learns of it: ComputeManager
calls the source's tracker at no step before the confirmation, and the
destination's claim reaches only the destination's agent. Recorded, the
move's migration consumer (nova's conductor moves the source's allocation
to it) is known to the source's agent, and once the guest has left the
instance no longer counts there (``running_vms``). An instance the agent
does not hold yet (a first start while the move was under way) is claimed
first, with the flavor and the CPUs it has on the node.
"""

import dataclasses
import logging

from nova import exception, objects
from nova.compute import vm_states

from rtagent.nova import arguments
from rtagent.nova.link import AgentRefused

LOG = logging.getLogger(__name__)

# Migration statuses after which the move is over.
_DONE = frozenset({"confirmed", "done", "completed"})
_UNDONE = frozenset({"reverted", "error", "failed", "cancelled"})
# The moves a source records (an evacuation's source is down: nova-compute
# there deletes the evacuated instances' allocations when it starts again).
_DEPARTING = frozenset({"resize", "migration", "live-migration"})
# What _gone_from says of an instance nova deleted.
_DELETED = "deleted"


@dataclasses.dataclass(frozen=True)
class NodeRecords:
    """What nova's database says about a node, read once per periodic.

    :param instances: the node's ``InstanceList`` (no attribute joined).
    :param moving: its migrations in progress or in error.
    """

    host: str
    cn: object
    instances: object
    moving: object


def reconcile(link, context, records, *, adopt, depart, claiming=lambda uuid: False):
    """Bring the agent's claims on ``records.cn`` to what nova's database
    says, by difference: one call reads the agent's claims and moves
    (``get_status``), and only what differs costs more: a move step for a
    move that ended, a move recorded at its source, a claim for an
    instance the agent does not hold, a release for a claim nova's rows do
    not explain. In the steady state that is no agent call and no database
    query beyond the two bulk reads in ``records``.

    :param adopt: callable(context, instance, cn, flavor, topology) that
        claims an instance nova has on the node through the agent, with
        ``flavor`` and the host CPUs ``topology`` (its
        ``InstanceNUMATopology`` here, or None) pins it to (raises
        AgentRefused).
    :param depart: callable(context, instance, cn, migration) that records
        a move out of ``cn`` with the agent (raises AgentRefused).
    :param claiming: callable(instance UUID) -> True while a claim of it
        or its release is under way (its rows not written yet): such an
        instance is neither released nor claimed here.
    :returns: the node's status as last read (``get_status``).
    """
    cn = records.cn
    status = link.call("get_status", node_uuid=cn.uuid)
    held = set(status.get("instance_uuids") or ())
    known = {m["migration_uuid"] for m in status.get("moves") or ()}
    if _record_departures(
        context, records, held, known, adopt=adopt, depart=depart, claiming=claiming
    ):
        status = link.call("get_status", node_uuid=cn.uuid)
        held = set(status.get("instance_uuids") or ())
    moving = _settle_moves(link, context, cn, status.get("moves") or (), claiming)
    moving |= {
        m.instance_uuid
        for m in records.moving
        if not _live_migration_landed(context, m) and not _landed_unrecorded(m, records, known)
    }
    here = {i.uuid for i in records.instances}
    states = status.get("instance_states") or {}
    deleted = False
    for uuid in held - here - moving:
        # Checked after the agent's claims were read: a claim under way
        # then is still marked now, or its rows are written and the look
        # below finds the instance here.
        if claiming(uuid):
            continue
        gone = _gone_from(context, uuid, records.host, cn.hypervisor_hostname)
        if gone == _DELETED:
            # Final: the agent heals its allocation at its next sync, not
            # after a second look (nova's tracker deleted it at once).
            LOG.info("Instance %s was deleted: its claim on node %s released", uuid, cn.uuid)
            deleted |= release_deleted(link, cn, uuid)
        elif gone:
            LOG.info("Instance %s is no longer on node %s: claim released", uuid, cn.uuid)
            release(link, cn, uuid)
    if deleted:
        # The embedded agent syncs now, so the allocation is gone when the
        # periodic returns, as with nova's tracker (a daemon's prompt sync
        # does it within a second).
        link.publish(cn.uuid)
    for listed in records.instances:
        if claiming(listed.uuid):
            continue
        if vm_states.allow_resource_removal(vm_state=listed.vm_state, task_state=listed.task_state):
            continue
        if listed.uuid in held:
            _refresh_states(link, cn, listed, states.get(listed.uuid))
        elif listed.uuid not in moving:
            _adopt(context, records, listed.uuid, adopt)
    return status


def _refresh_states(link, cn, listed, held):
    """Send nova's states of an instance the agent holds, if they differ
    from the agent's ``held`` ones (``get_status``'s ``instance_states``):
    one call for a change, none otherwise. nova's tracker recounted its
    stats at every periodic; the agent's stay current this way between
    the adapter's own ``update_instance`` calls (a build that ended, a
    task nova ran without telling its tracker)."""
    states = {
        "vm_state": listed.vm_state,
        "task_state": listed.task_state,
        "os_type": arguments.os_type(listed),
        "project_id": arguments.project_id(listed),
    }
    if held is None or all(held.get(key) == value for key, value in states.items()):
        # None: an agent older than RPC 1.8 (it cannot hold them).
        return
    try:
        link.call("update_instance", node_uuid=cn.uuid, instance_uuid=listed.uuid, **states)
    except AgentRefused as exc:
        # Released meanwhile (deleted, offloaded): nothing to keep current.
        if exc.code != "tracker.instance_not_found":
            LOG.warning("States of instance %s on %s: %s", listed.uuid, cn.uuid, exc)


def _departs(migration, records):
    """True for a move out of ``records.cn`` to another node that is under
    way and that this node's source records: once its destination is
    chosen (a live migration's conductor names it after scheduling)."""
    return (
        migration.migration_type in _DEPARTING
        and migration.status not in _DONE | _UNDONE
        and (migration.source_compute, migration.source_node)
        == (records.host, records.cn.hypervisor_hostname)
        and bool(migration.dest_compute and migration.dest_node)
        and (migration.dest_compute, migration.dest_node)
        != (migration.source_compute, migration.source_node)
    )


def _landed_unrecorded(migration, records, known):
    """True for a resize or cold migration to ``records.cn`` whose guest
    runs here already (``finished``: waiting for its confirmation) and
    that the agent has not recorded: a first start while it waited. The
    instance is then claimed here like any other (with the new flavor and
    the CPUs it runs on); a revert releases it."""
    return (
        migration.uuid not in known
        and migration.status == "finished"
        and (migration.dest_compute, migration.dest_node)
        == (records.host, records.cn.hypervisor_hostname)
        and (migration.source_compute, migration.source_node)
        != (migration.dest_compute, migration.dest_node)
    )


def _record_departures(context, records, held, known, *, adopt, depart, claiming):
    """Record with the agent the moves out of the node it does not know;
    :returns: True if one was recorded.

    Each migration is read again first, then the marks of steps under way
    checked (as :func:`_settle_moves` does): a confirm or revert marks its
    instance before it writes the migration's row, so a row read here that
    says the move is under way is either still so when the agent records
    it, or its step is marked now and the move is left to it."""
    recorded = False
    for listed in records.moving:
        if listed.uuid in known or not _departs(listed, records):
            continue
        migration = _migration(context, listed.uuid)
        if migration is None or not _departs(migration, records):
            continue
        if claiming(migration.instance_uuid):
            continue
        instance = _moving_instance(context, migration.instance_uuid)
        if instance is None:
            continue
        try:
            if migration.instance_uuid not in held:
                # A first start while the move was under way: the flavor
                # and cells the instance has here, the source (once the
                # guest has left, those the move keeps as old).
                mc = instance.migration_context
                old_numa = mc.old_numa_topology if mc is not None else instance.numa_topology
                flavor = instance.old_flavor or instance.flavor
                adopt(context, instance, records.cn, flavor, old_numa)
            depart(context, instance, records.cn, migration)
        except AgentRefused as exc:
            again = _migration(context, migration.uuid)
            if again is None or not _departs(again, records):
                # A confirm or revert ended it meanwhile (its step took the
                # instance first): nothing to record any more.
                continue
            LOG.error(
                "Move %s of instance %s out of node %s cannot be recorded with the agent: %s",
                migration.uuid,
                migration.instance_uuid,
                records.cn.hypervisor_hostname,
                exc,
            )
            continue
        LOG.info(
            "Move %s of instance %s out of node %s recorded at its source",
            migration.uuid,
            migration.instance_uuid,
            records.cn.hypervisor_hostname,
        )
        recorded = True
    return recorded


def _settle_moves(link, context, cn, moves, claiming):
    """Finish, confirm or revert the agent's moves on ``cn`` that nova
    says ended. :returns: the instance UUIDs of those still under way
    (and of those whose step is in flight: their caller takes it)."""
    moving = set()
    for move in moves:
        migration = _migration(context, move["migration_uuid"])
        # Checked after the migration is read: a step marks its instance
        # before it writes the migration's row, so a row read here that
        # says the move ended is either still marked now, or its caller has
        # already told the agent (and the step below changes nothing). A
        # confirm at a same-host resize's node, stepped here first, would
        # make the caller's confirm find no move and release the instance's
        # own claim.
        if claiming(move["instance_uuid"]):
            moving.add(move["instance_uuid"])
            continue
        state = migration.status if migration is not None else "error"
        if _live_migration_landed(context, migration):
            state = "completed"
        # A move the agent has finished already and that only waits for
        # its confirmation costs nothing: no call, no log line.
        if (state in _DONE or state == "finished") and move.get("status") != "finished":
            step(link, "finish_move", cn, move["migration_uuid"])
        if state in _DONE:
            step(link, "confirm_move", cn, move["migration_uuid"])
        elif state in _UNDONE:
            step(link, "revert_move", cn, move["migration_uuid"])
        else:
            moving.add(move["instance_uuid"])
    return moving


def _adopt(context, records, instance_uuid, adopt):
    """Claim an instance nova has on the node without a claim (adopted at
    a first start, or a claim lost), with the CPUs it runs on. Read again
    first: the list was read before the agent's claims, and an instance
    deleted in between (its claim released) must not be claimed back."""
    nodename = records.cn.hypervisor_hostname
    instance = _still_here(context, instance_uuid, records.host, nodename)
    if instance is None:
        return
    try:
        adopt(context, instance, records.cn, instance.flavor, instance.numa_topology)
    except AgentRefused as exc:
        LOG.error(
            "Instance %s is on node %s in nova's database but the agent refuses its claim: %s",
            instance_uuid,
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


def release_deleted(link, cn, instance_uuid):
    """Release the claim of an instance nova deleted, as deleted (the
    agent heals its allocation at its first look); :returns: True if it
    was released."""
    try:
        link.call(
            "update_instance", node_uuid=cn.uuid, instance_uuid=instance_uuid, vm_state="deleted"
        )
    except AgentRefused as exc:
        if exc.code != "tracker.instance_not_found":
            LOG.warning("Releasing deleted instance %s on %s: %s", instance_uuid, cn.uuid, exc)
        return False
    return True


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


def _moving_instance(context, instance_uuid):
    """The instance of a move, with its flavors, or None if deleted."""
    try:
        return objects.Instance.get_by_uuid(
            context, instance_uuid, expected_attrs=["flavor", "migration_context"]
        )
    except exception.InstanceNotFound:
        return None


def _still_here(context, instance_uuid, host, nodename):
    """The instance, with its flavor, if nova's database still has it on
    ``host`` and ``nodename`` holding resources; else None."""
    try:
        instance = objects.Instance.get_by_uuid(context, instance_uuid, expected_attrs=["flavor"])
    except exception.InstanceNotFound:
        return None
    if (instance.host, instance.node) != (host, nodename) or vm_states.allow_resource_removal(
        vm_state=instance.vm_state, task_state=instance.task_state
    ):
        return None
    return instance


def _gone_from(context, instance_uuid, host, nodename):
    """:data:`_DELETED` if nova's database says the instance is deleted
    (or has no row at all: archived), True if it is not on ``host`` and
    ``nodename`` (offloaded, elsewhere), else False."""
    try:
        instance = objects.Instance.get_by_uuid(
            context.elevated(read_deleted="yes"), instance_uuid, expected_attrs=[]
        )
    except exception.InstanceNotFound:
        return _DELETED
    if instance.deleted:
        return _DELETED
    if vm_states.allow_resource_removal(vm_state=instance.vm_state, task_state=instance.task_state):
        return True
    return (instance.host, instance.node) != (host, nodename)
