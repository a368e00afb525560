# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The rows of a move that nova's other services read, written at the
destination's claim: the migration's destination and status, and the
instance's MigrationContext.

The source compute reads ``migration.dest_host`` and ``dest_node`` to move
the guest, ``finish_resize`` applies the migration context, and the API
shows the status; so these are written as nova's own tracker writes them.
"""

import copy
import uuid as uuidlib

from nova import exception, objects
from nova.pci import request as pci_request

# Namespace of the stand-in UUIDs of source nodes in another cell.
_OTHER_CELL_NODES = uuidlib.UUID("6f1f3c52-5d0e-4c61-9a57-3c7f0e0b9a41")


def destination(context, instance, new_flavor, cn, migration, *, move_type, host, host_ip):
    """``migration`` with node ``cn`` of ``host`` as its destination and
    status ``pre-migrating`` (a live migration keeps ``accepted``), saved;
    created first if the caller had none (nova's older callers)."""
    if migration is None:
        migration = objects.Migration(context=context.elevated())
        migration.old_instance_type_id = instance.flavor.id
        migration.new_instance_type_id = new_flavor.id
        migration.instance_uuid = instance.uuid
        migration.source_compute = instance.host
        migration.source_node = instance.node
        migration.migration_type = move_type or (
            "resize" if instance.flavor.id != new_flavor.id else "migration"
        )
        migration.status = "pre-migrating"
        _set_destination(migration, host, cn, host_ip)
        migration.create()
        return migration
    _set_destination(migration, host, cn, host_ip)
    if not migration.is_live_migration:
        migration.status = "pre-migrating"
    migration.save()
    return migration


def _set_destination(migration, host, cn, host_ip):
    migration.dest_compute = host
    migration.dest_node = cn.hypervisor_hostname
    migration.dest_compute_id = cn.id
    migration.dest_host = host_ip


def source_node_uuid(context, migration):
    """The UUID of the node the instance moves from.

    Looked up by host and node name: ``instance.compute_id`` is a row id of
    the instance's own cell, which in a cross-cell move names a node of
    another database. A source node in another cell is not in this one at
    all; the destination only needs to know that the move comes from
    elsewhere, so it gets a stable stand-in derived from the names.
    """
    return _node_uuid(context, migration.source_compute, migration.source_node)


def dest_node_uuid(context, migration):
    """The UUID of the node the instance moves to (as :func:`source_node_uuid`)."""
    return _node_uuid(context, migration.dest_compute, migration.dest_node)


def _node_uuid(context, host, nodename):
    try:
        return objects.ComputeNode.get_by_host_and_nodename(context, host, nodename).uuid
    except exception.ComputeHostNotFound:
        return str(uuidlib.uuid5(_OTHER_CELL_NODES, f"{host}/{nodename}"))


def new_pci_requests(instance, new_flavor):
    """The PCI requests of the instance at a move's destination, as nova's
    tracker makes them: the new flavor's (with new request ids) and the
    instance's SR-IOV ports'."""
    found = pci_request.get_pci_requests_from_flavor(new_flavor)
    found.instance_uuid = instance.uuid
    if instance.pci_requests:
        for request in instance.pci_requests.requests:
            if request.source == objects.InstancePCIRequest.NEUTRON_PORT:
                found.requests.append(request)
    return found


def migration_context(context, instance, migration, new_numa, *, new_requests, new_devices=()):
    """The MigrationContext of a move whose destination placed the guest on
    ``new_numa`` (an ``InstanceNUMATopology`` with the agent's cells and
    pinning, or None) and gave it ``new_devices`` (nova's PciDevice rows of
    the devices the agent chose there) for ``new_requests``."""
    return objects.MigrationContext(
        context=context,
        instance_uuid=instance.uuid,
        migration_id=migration.id,
        old_numa_topology=instance.numa_topology,
        new_numa_topology=new_numa,
        old_pci_devices=copy.deepcopy(instance.pci_devices),
        new_pci_devices=objects.PciDeviceList(objects=list(new_devices)),
        old_pci_requests=instance.pci_requests,
        new_pci_requests=new_requests,
        old_resources=instance.resources,
        new_resources=None,
    )
