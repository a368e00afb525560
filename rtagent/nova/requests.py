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
