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


def keys_of(instance):
    """The stats keys ``instance`` counts one in (see :func:`stats`)."""
    keys = [
        "num_instances",
        f"num_vm_{instance.vm_state}",
        f"num_task_{instance.task_state}",
        f"num_proj_{instance.project_id}",
    ]
    if instance.vm_state == "building" or instance.task_state in IO_TASK_STATES:
        keys.append("io_workload")
    return keys


def counts_of(instances):
    """{key: instances counted in it} over ``instances`` (O(N)); carried
    from one state to the next by :mod:`rtagent.tracker.sums`."""
    counts = collections.Counter()
    for instance in instances:
        counts.update(keys_of(instance))
    return counts


def from_counts(counts, failed_builds=0):
    """The stats dict (string values) of carried ``counts``: keys counting
    nobody left out, ``num_instances`` and ``io_workload`` always there."""
    present = {key: value for key, value in counts.items() if value}
    present.setdefault("num_instances", 0)
    present.setdefault("io_workload", 0)
    result = {key: str(value) for key, value in sorted(present.items())}
    result["failed_builds"] = str(failed_builds)
    return result


def stats(instances, failed_builds=0):
    """The stats dict (string values) for ``instances`` on this node.

    :param failed_builds: consecutive failed builds (nova's
        ``failed_builds``; reset by a successful build).
    """
    return from_counts(counts_of(instances), failed_builds)
