"""What nova's scheduler reads of a host (its ComputeNode record's
``stats``, ``current_workload`` and ``running_vms``) beside what stock
nova's own ``nova.compute.stats.Stats`` computes for the same servers, as
nova's periodic computes it: the stats cleared (``failed_builds`` kept;
the scenario has no failed build on a compute host), then every instance
nova's rows place on the host and node, holding resources, counted once.
Both read from nova's cell database; :func:`compare` is pure.
"""

import json

from nova.compute import stats as nova_stats
from nova.compute import vm_states

from tests.cloud.checks import Finding

_INSTANCE_FIELDS = ("uuid", "vm_state", "task_state", "os_type", "project_id", "host", "node")


def read(control, hosts):
    """(records, instances) of ``hosts`` from nova_cell1: host -> its
    record (``stats`` dict, ``current_workload``, ``running_vms``,
    ``hypervisor_hostname``); the undeleted instances on them (dicts)."""
    import psycopg2

    conn = psycopg2.connect(
        host="127.0.0.1", port=control.postgres.port, user="postgres", dbname="nova_cell1"
    )
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT host, hypervisor_hostname, stats, current_workload, running_vms "
                "FROM compute_nodes WHERE deleted = 0 AND host = ANY(%s)",
                (list(hosts),),
            )
            records = {
                row[0]: {
                    "hypervisor_hostname": row[1],
                    "stats": json.loads(row[2] or "{}"),
                    "current_workload": row[3],
                    "running_vms": row[4],
                }
                for row in cursor.fetchall()
            }
            cursor.execute(
                f"SELECT {', '.join(_INSTANCE_FIELDS)} FROM instances "
                "WHERE deleted = 0 AND host = ANY(%s)",
                (list(hosts),),
            )
            instances = [dict(zip(_INSTANCE_FIELDS, row, strict=True)) for row in cursor.fetchall()]
    finally:
        conn.close()
    return records, instances


def novas_own(instances, host, nodename):
    """(stats, current_workload, running_vms) nova's periodic writes for
    ``host``'s node ``nodename`` given every instance's row (nova's class
    computes them; ComputeNode.stats holds strings)."""
    stats = nova_stats.Stats()
    stats["failed_builds"] = 0
    for instance in instances:
        if (instance["host"], instance["node"]) != (host, nodename):
            continue
        if vm_states.allow_resource_removal(
            vm_state=instance["vm_state"], task_state=instance["task_state"]
        ):
            continue
        stats.update_stats_for_instance(instance)
    return (
        {key: str(value) for key, value in stats.items()},
        stats.calculate_workload(),
        stats.num_instances,
    )


def compare(host, record, instances, driver_keys=()):
    """Findings where ``host``'s record differs from nova's own Stats.

    :param driver_keys: the stats the host's virt driver reports itself
        (nova digests its ``get_available_resource()["stats"]`` into the
        record first: libvirt's ``uptime``, whose value changes by the
        second): each must be there; their values are not nova's Stats'.
    """
    if record is None:
        return [Finding(host, "ComputeNode", "record", "one", None)]
    stats, workload, running = novas_own(instances, host, record["hypervisor_hostname"])
    got_stats = {k: v for k, v in record["stats"].items() if k not in driver_keys}
    found = [
        Finding(host, "ComputeNode", f"the virt driver's {key} in stats", "present", None)
        for key in driver_keys
        if key not in record["stats"]
    ]
    for what, expected, got in (
        ("stats", stats, got_stats),
        ("current_workload", workload, record["current_workload"]),
        ("running_vms", running, record["running_vms"]),
    ):
        if expected != got:
            found.append(Finding(host, "ComputeNode vs nova's Stats", what, expected, got))
    return found
