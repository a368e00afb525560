"""What a node holds of one instance, as ``get_instance`` answers it (API
1.2): the claim, its moves, whether it is released or pending, (1.3)
where their NUMA cells are and (1.4) which PCI devices they hold. Pure
over a snapshot, so reading never waits for the tracker lock.

A caller reads an outcome back with it instead of probing with a mutation:
after a call that timed out, after ``rpc.internal_error``, after a broker
outage.
"""

import bisect

from rtagent.tracker import errors


def instance_record(snapshot, instance_uuid):
    """The node's record of ``instance_uuid`` (see docs/rpc-api.md).

    :param snapshot: a :class:`rtagent.tracker.model.NodeSnapshot`.
    :raises InstanceNotFound: the node holds nothing of it: no claim, no
        move, not released, no standalone claim in flight.
    """
    tracked = _find(snapshot.instances, instance_uuid)
    moves = [m for m in snapshot.migrations if m.instance_uuid == instance_uuid]
    released = instance_uuid in snapshot.released
    pending = instance_uuid in snapshot.pending
    if tracked is None and not moves and not released and not pending:
        raise errors.InstanceNotFound(instance_uuid=instance_uuid, node=snapshot.node_uuid)
    return {
        "instance_uuid": instance_uuid,
        "node_uuid": snapshot.node_uuid,
        "claim": _claim(tracked) if tracked is not None else None,
        "pending": pending,
        "released": released,
        "moves": [_move(m) for m in moves],
    }


def numa_cells(claim):
    """A :class:`~rtagent.numa.usage.NumaClaim` as replies show it (one
    object per guest cell: host cell, pinning, emulator CPUs, page size),
    or None for a guest without a NUMA topology."""
    return claim.describe() if claim is not None else None


def move_numa_cells(move, node_uuid):
    """The NUMA cells ``move`` (as recorded) holds at ``node_uuid`` as its
    destination (``start_move``'s answer), or None: this node is only its
    source, or the guest asks for no topology."""
    if move is None or move.dest_node != node_uuid:
        return None
    return numa_cells(move.new_numa)


def pci_devices(held):
    """HeldDevice values as replies show them (address, dev_type,
    vendor_id, product_id, numa_node, request_id), in request order."""
    return [h.describe() for h in held]


def move_pci_devices(move, node_uuid):
    """The PCI devices ``move`` (as recorded) takes at ``node_uuid`` as its
    destination (``start_move``'s answer); ``[]`` on the source."""
    if move is None or move.dest_node != node_uuid:
        return []
    return pci_devices(move.new_pci)


def _find(instances, uuid):
    """The instance ``uuid`` in ``instances`` (sorted by UUID), or None."""
    index = bisect.bisect_left(instances, uuid, key=lambda i: i.uuid)
    if index < len(instances) and instances[index].uuid == uuid:
        return instances[index]
    return None


def _claim(instance):
    return {
        "flavor": instance.flavor.to_dict(),
        "resources": dict(instance.resources),
        "assigned": {rc: list(ids) for rc, ids in sorted(instance.assigned.items())},
        "volume_backed": instance.volume_backed,
        "project_id": instance.project_id,
        "vm_state": instance.vm_state,
        "task_state": instance.task_state,
        "numa": numa_cells(instance.numa),
        "pci_devices": pci_devices(instance.pci_devices),
    }


def _move(move):
    return {
        "migration_uuid": move.uuid,
        "migration_type": move.migration_type,
        "status": move.status,
        "source_node": move.source_node,
        "dest_node": move.dest_node,
        "old_resources": dict(move.old_resources),
        "new_resources": dict(move.new_resources),
        "old_numa": numa_cells(move.old_numa),
        "new_numa": numa_cells(move.new_numa),
        "old_pci_devices": pci_devices(move.old_pci),
        "new_pci_devices": pci_devices(move.new_pci),
    }
