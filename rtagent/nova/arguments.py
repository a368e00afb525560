# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova objects as the RPC API's arguments (pure: reads objects, calls nothing).

The agent's accounting is nova's (a flavor's vCPUs, memory plus swap, root
plus ephemeral disk, no root disk for a volume-backed instance), so these
functions only carry the numbers across.
"""

# The scheduler's limits the agent checks; numa_topology waits for NUMA claims.
_LIMIT_KEYS = ("memory_mb", "disk_gb", "vcpu")


def flavor(nova_flavor):
    """The API's flavor object for a ``nova.objects.Flavor``."""
    return {
        "vcpus": int(nova_flavor.vcpus),
        "memory_mb": int(nova_flavor.memory_mb),
        "root_gb": int(nova_flavor.root_gb or 0),
        "ephemeral_gb": int(nova_flavor.ephemeral_gb or 0),
        "swap_mb": int(nova_flavor.swap or 0),
        "name": str(nova_flavor.name or "")[:255],
    }


def limits(nova_limits):
    """The API's ``limits`` from the scheduler's limits (a dict, a
    ``SchedulerLimits`` or None); only the keys the agent checks."""
    if nova_limits is None:
        return None
    if hasattr(nova_limits, "to_dict"):
        nova_limits = nova_limits.to_dict()
    picked = {k: nova_limits.get(k) for k in _LIMIT_KEYS if nova_limits.get(k) is not None}
    return picked or None


def move_type(migration):
    """The API's ``migration_type`` of a ``nova.objects.Migration``."""
    kind = migration.migration_type
    if kind in ("resize", "migration", "live-migration", "evacuation"):
        return kind
    return (
        "resize"
        if migration.old_instance_type_id != migration.new_instance_type_id
        else "migration"
    )


def project_id(instance):
    return str(instance.project_id or "")[:255]


def states(instance):
    """nova's states of ``instance`` that the agent counts in the
    scheduler's stats (RPC 1.8), as a claim or a move sends them."""
    return {
        "vm_state": instance.vm_state,
        "task_state": instance.task_state,
        "os_type": os_type(instance),
    }


def os_type(instance):
    value = instance.os_type if instance.obj_attr_is_set("os_type") else None
    return None if value is None else str(value)[:255]


# Keys of a nova request spec that Placement matched (with
# [filter_scheduler] pci_in_placement); the agent's own layout puts the
# resource class and traits on its providers, so they are not sent. The
# providers the scheduler allocated (``rp_uuids``) are: the agent chooses
# among their devices.
_PLACEMENT_SPEC_KEYS = ("resource_class", "traits")


def pci_args(found):
    """``pci_requests`` for the agent (from :func:`pci_requests`), left out
    when there are none (so an agent older than RPC 1.4 is asked nothing it
    does not know)."""
    return {"pci_requests": found} if found else {}


def pci_requests(nova_requests):
    """The API's ``pci_requests`` for a ``nova.objects.InstancePCIRequests``
    (or None): by spec, nova's specs as they are, with nova's request ids;
    None when there is no request."""
    if nova_requests is None or not nova_requests.requests:
        return None
    found = []
    for request in nova_requests.requests:
        item = {
            "spec": [
                # A None stays: nova's "no such tag" (a tunnel port's
                # physical_network).
                {k: v for k, v in spec.items() if k not in _PLACEMENT_SPEC_KEYS}
                for spec in request.spec
            ],
            "count": int(request.count),
        }
        if request.obj_attr_is_set("numa_policy") and request.numa_policy:
            item["numa_policy"] = request.numa_policy
        if request.obj_attr_is_set("request_id") and request.request_id:
            item["request_id"] = request.request_id
        found.append(item)
    return found
