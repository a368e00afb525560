"""Nova's scheduler stats for a node, as a pure function of its instances.

Nova's ``ComputeNode.stats`` is a dict of strings that filters and weighers
read (``IoOpsFilter`` reads ``io_workload``, ``NumInstancesFilter``
``num_instances``, ``AggregateTypeAffinityFilter``-like filters
``num_os_type_<os_type>``); the keys and their meaning are nova's
(``nova.compute.stats.Stats``). nova's tracker clears its stats at every
periodic and counts the node's instances again, so the record then holds
exactly what :func:`stats` computes here: one ``num_vm_<vm_state>``,
``num_task_<task_state>``, ``num_os_type_<os_type>`` and
``num_proj_<project_id>`` per instance (``None`` spelled ``None``, as
nova's ``"%s"`` formatting spells it), ``num_instances`` and
``io_workload`` only once an instance was counted, and ``failed_builds``
always.
"""

import collections

# Task states that load the host's disks and network (nova's io_workload,
# with vm_state building).
IO_TASK_STATES = frozenset(
    {
        "resize_migrating",
        "rebuilding",
        "resize_prep",
        "image_snapshot",
        "image_backup",
        "rescuing",
        "unshelving",
    }
)
_IO_VM_STATES = frozenset({"building"})
# Counted only to know whether nova's tracker has counted any instance:
# it writes io_workload from its first instance on, and never drops it.
_IO = "io_workload"
_TASK = "num_task_"


def keys_of(instance):
    """The stats keys ``instance`` counts one in (see :func:`stats`)."""
    keys = [
        "num_instances",
        f"num_vm_{instance.vm_state}",
        f"num_task_{instance.task_state}",
        f"num_os_type_{instance.os_type}",
        f"num_proj_{instance.project_id}",
    ]
    if instance.vm_state in _IO_VM_STATES or instance.task_state in IO_TASK_STATES:
        keys.append(_IO)
    return keys


def counts_of(instances):
    """{key: instances counted in it} over ``instances`` (O(N)); carried
    from one state to the next by :mod:`rtagent.tracker.sums`."""
    counts = collections.Counter()
    for instance in instances:
        counts.update(keys_of(instance))
    return counts


def from_counts(counts, failed_builds=0):
    """The stats dict (string values) of carried ``counts``, as nova's
    periodic leaves it: keys counting nobody left out, ``io_workload``
    present (0 or more) once ``num_instances`` is."""
    present = {key: value for key, value in counts.items() if value}
    if present.get("num_instances"):
        present.setdefault(_IO, 0)
    result = {key: str(value) for key, value in sorted(present.items())}
    result["failed_builds"] = str(failed_builds)
    return result


def stats(instances, failed_builds=0):
    """The stats dict (string values) for ``instances`` on this node.

    :param failed_builds: consecutive failed builds (nova's
        ``failed_builds``; reset by a successful build).
    """
    return from_counts(counts_of(instances), failed_builds)


def current_workload(stats_dict):
    """nova's ``current_workload`` of a stats dict: the instances with a
    task under way (every ``num_task_*`` count but ``num_task_None``)."""
    return sum(
        int(value)
        for key, value in stats_dict.items()
        if key.startswith(_TASK) and not key.endswith("None")
    )
