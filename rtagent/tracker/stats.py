"""Nova's scheduler stats for a node, as a pure function of its instances.

Nova's ``ComputeNode.stats`` is a dict of strings that filters and weighers
read (e.g. ``num_instances``, ``io_workload``, ``num_proj_<id>``); the keys
and their meaning are nova's.
"""

import collections

# Task states that load the host's disks and network (nova's io_workload).
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


def io_workload(instances):
    """Instances that are building or in a disk/network-heavy task."""
    return sum(1 for i in instances if i.vm_state == "building" or i.task_state in IO_TASK_STATES)


def stats(instances, failed_builds=0):
    """The stats dict (string values) for ``instances`` on this node.

    :param failed_builds: consecutive failed builds (nova's
        ``failed_builds``; reset by a successful build).
    """
    counts = collections.Counter()
    for instance in instances:
        counts["num_instances"] += 1
        counts[f"num_vm_{instance.vm_state}"] += 1
        counts[f"num_task_{instance.task_state}"] += 1
        counts[f"num_proj_{instance.project_id}"] += 1
    counts["io_workload"] = io_workload(instances)
    counts["num_instances"] += 0  # present even when zero
    result = {key: str(value) for key, value in sorted(counts.items())}
    result["failed_builds"] = str(failed_builds)
    return result
