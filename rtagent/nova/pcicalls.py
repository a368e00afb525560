# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""ComputeManager's PCI calls outside a claim, answered by the agent.

nova asks its tracker for PCI devices twice outside a claim:
``claim_pci_devices`` at the destination of a live migration, and the same
call for an SR-IOV interface attached to a running instance; it gives an
interface's device back with ``unclaim_pci_devices``. Here these become the
agent's calls (``get_instance``, ``start_move``, ``attach_pci_devices``,
``detach_pci_devices``), one node at a time; nova's rows of the devices
chosen are the tracker's (:mod:`.pcirows`).
"""

import logging

from nova import objects
from nova.compute import utils as compute_utils

from rtagent.nova import arguments, migrations
from rtagent.nova.link import AgentRefused

LOG = logging.getLogger(__name__)

# A live migration's statuses while its destination is checked and prepared.
_LIVE_CHECKING = ("accepted", "queued", "preparing", "running")

# The agent's refusals of an attach that mean "no device for it here"
# (nova's PciDeviceRequestFailed); any other stays an error.
_NO_DEVICE = frozenset(
    {
        "pci.devices_unavailable",
        "pci.invalid_request",
        "tracker.instance_claim_conflict",
        "tracker.instance_not_found",
        "tracker.node_not_found",
        "tracker.node_not_ready",
        "tracker.host_unavailable",
        "tracker.state_error",
    }
)


def devices_for(link, context, cn, pci_requests):
    """The devices (as the agent's replies show them) the agent gives at
    node ``cn`` for ``pci_requests`` (nova's ``InstancePCIRequests``):

    - those its move of the instance to ``cn`` chose for them (recorded now
      if ComputeManager checks a live migration here without a
      live-migration claim);
    - with no such move and the instance claimed at ``cn``, devices the
      agent adds to its claim now (an interface attached).

    :returns: a list of device dicts, or None when ``cn`` gives none.
    """
    instance_uuid = pci_requests.instance_uuid
    found = _record(link, cn, instance_uuid)
    moves = [m for m in found.get("moves") or () if m.get("dest_node") == cn.uuid]
    if not moves:
        moves = _start_live_move(link, context, pci_requests, cn)
    if not moves and found.get("claim") is not None:
        return _attach(link, cn, pci_requests)
    wanted = {r.request_id for r in pci_requests.requests}
    for move in moves:
        chosen = [d for d in move.get("new_pci_devices") or () if d.get("request_id") in wanted]
        if {d.get("request_id") for d in chosen} == wanted:
            return chosen
    return None


def detach(link, cn, instance_uuid, address):
    """Give the device at ``address`` back to node ``cn`` (an interface
    detached, or its attach failed); nothing when the instance is not
    claimed there."""
    try:
        link.call(
            "detach_pci_devices",
            node_uuid=cn.uuid,
            instance_uuid=instance_uuid,
            addresses=[address],
        )
    except AgentRefused as exc:
        if exc.code != "tracker.instance_not_found":
            raise


def _record(link, cn, instance_uuid):
    """What the agent holds of the instance at ``cn`` (``get_instance``),
    ``{}`` when nothing."""
    try:
        return link.call("get_instance", node_uuid=cn.uuid, instance_uuid=instance_uuid)
    except AgentRefused:
        return {}


def _attach(link, cn, pci_requests):
    """The devices the agent adds to the instance's claim at ``cn`` for
    ``pci_requests``, or None when it refuses."""
    try:
        placed = link.call(
            "attach_pci_devices",
            node_uuid=cn.uuid,
            instance_uuid=pci_requests.instance_uuid,
            pci_requests=arguments.pci_requests(pci_requests),
        )
    except AgentRefused as exc:
        if exc.code not in _NO_DEVICE:
            raise
        LOG.warning("PCI devices for instance %s refused: %s", pci_requests.instance_uuid, exc)
        return None
    return placed.get("pci_devices") or []


def _start_live_move(link, context, pci_requests, cn):
    """The agent's record, at ``cn``, of the instance's live migration that
    ComputeManager checks here without a live-migration claim (a guest
    without NUMA topology): its devices are chosen by the agent now, with
    the flavor's resources, for all the instance's requests (those of
    ``pci_requests`` as given: the conductor put the destination's
    providers in their specs). :returns: the move as ``get_instance`` lists
    it, in a list; ``[]`` when there is no such migration or it is refused."""
    instance_uuid = pci_requests.instance_uuid
    found = objects.MigrationList.get_by_filters(
        context,
        {
            "instance_uuid": instance_uuid,
            "migration_type": "live-migration",
            "status": list(_LIVE_CHECKING),
        },
        sort_keys=["created_at", "id"],
        sort_dirs=["desc", "desc"],
    )
    if not found:
        return []
    migration = found[0]
    instance = objects.Instance.get_by_uuid(
        context, instance_uuid, expected_attrs=["flavor", "pci_requests"]
    )
    given = {r.request_id: r for r in pci_requests.requests}
    asked = objects.InstancePCIRequests(
        instance_uuid=instance_uuid,
        requests=[
            given.get(r.request_id, r)
            for r in (instance.pci_requests.requests if instance.pci_requests else [])
        ],
    )
    try:
        placed = link.call(
            "start_move",
            node_uuid=cn.uuid,
            migration_uuid=migration.uuid,
            instance_uuid=instance_uuid,
            migration_type="live-migration",
            source_node=migrations.source_node_uuid(context, migration),
            dest_node=cn.uuid,
            old_flavor=arguments.flavor(instance.flavor),
            new_flavor=arguments.flavor(instance.flavor),
            volume_backed=bool(compute_utils.is_volume_backed_instance(context, instance)),
            **arguments.pci_args(arguments.pci_requests(asked)),
        )
    except AgentRefused as exc:
        LOG.warning("Live migration of %s to %s refused: %s", instance_uuid, cn.uuid, exc)
        return []
    return [{"dest_node": cn.uuid, "new_pci_devices": placed.get("pci_devices") or []}]
