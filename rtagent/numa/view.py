"""A node's NUMA cells as nova's scheduler reads them (``ComputeNode.numa_topology``,
a ``NUMATopology`` of ``NUMACell`` values), as plain JSON. Pure.

Field names and meanings are nova's ``NUMACell``'s: ``cpuset`` are the
cell's shared CPUs, ``pcpuset`` its dedicated ones, ``memory`` and
``memory_usage`` in MiB, ``cpu_usage`` the shared vCPUs placed on it,
``pinned_cpus`` the dedicated CPUs taken (pinned vCPUs, isolated cores,
emulator threads), ``siblings`` the cell's cores as lists of thread ids,
``mempages`` one entry per page size (``size_kb``, ``total``, ``used``,
``reserved``), ``socket`` the cell's socket (None when unknown: nova's PCI
``socket`` policy reads it), ``network_metadata`` the physical networks
and tunnels with NUMA affinity here (``physnets``, ``tunneled``; rtagent
has no such affinity configured, so none, as nova without its
``[neutron_physnet_*] numa_nodes`` options).
"""


def numa_topology(cells):
    """``{"cells": [...]}`` for ``cells`` (HostCell values with their
    usage, see :func:`rtagent.numa.usage.with_usage`), or None for a host
    that reports no NUMA cells."""
    if not cells:
        return None
    return {"cells": [_cell(cell) for cell in cells]}


def _cell(cell):
    return {
        "id": cell.id,
        "cpuset": sorted(cell.cpuset),
        "pcpuset": sorted(cell.pcpuset),
        "memory": cell.memory_mb,
        "cpu_usage": cell.cpu_usage,
        "memory_usage": cell.memory_usage,
        "pinned_cpus": sorted(cell.pinned),
        "siblings": [sorted(core) for core in cell.siblings],
        "mempages": [
            {"size_kb": p.size_kb, "total": p.total, "used": p.used, "reserved": p.reserved}
            for p in cell.pages
        ],
        "socket": cell.socket,
        "network_metadata": {"physnets": [], "tunneled": False},
    }
