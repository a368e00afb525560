"""The compute-node view a Nova scheduler reads (``HostState``), as a pure
function of a node snapshot.

Field names and meanings are nova's ComputeNode's: ``memory_mb_used`` and
``local_gb_used`` start at the host's reservation, ``vcpus_used`` does not
and counts pinned vCPUs (PCPU) too, as nova's resource tracker does;
``vcpus`` is the VCPU total (``cpu_shared_set``, or every online CPU when
neither CPU set is given, 0 with ``cpu_dedicated_set`` alone), as nova's
libvirt driver reports it. ``pci_device_pools`` is nova's PciDevicePool
list (what its PciPassthroughFilter reads): the free tracked devices,
grouped as nova groups them.
"""

import datetime
import json

from rtagent.numa.view import numa_topology
from rtagent.pci import pools
from rtagent.resources import DISK_GB, MEMORY_MB, PCPU, VCPU
from rtagent.tracker import ledger, stats


def compute_node(snapshot, host_ip, now=None, *, metrics=(), pci_in_placement=False, revision=None):
    """The compute-node dict for ``snapshot``.

    :param host_ip: the node's IP address (``[DEFAULT] my_ip``).
    :param now: a timezone-aware datetime for ``updated_at`` (default: now).
    :param metrics: the host's ``HostMetric`` values (the tracker's
        ``host_metrics()``), listed as nova's ``MonitorMetricList.to_list()``.
    :param pci_in_placement: ``[pci] report_in_placement``: each PCI pool
        names its device provider (``rp_uuid``), as nova's scheduler needs.
    :param revision: ``{"incarnation", "serial"}``: which state of the
        node's accounting the view shows (docs/rpc-api.md,
        ``get_compute_node``), or None to leave it out.
    """
    host = snapshot.host
    policy = snapshot.policy
    invs = snapshot.inventories
    used = snapshot.usage
    memory_mb = host.memory_mb if host else 0
    local_gb = host.local_gb if host else 0
    memory_used = policy.reserved_host_memory_mb + used.get(MEMORY_MB, 0)
    local_used = policy.reserved_host_disk_mb / 1024 + used.get(DISK_GB, 0)
    free_disk = local_gb - local_used
    least = getattr(host, "disk_available_least", None)
    updated = (now or datetime.datetime.now(datetime.timezone.utc)).isoformat()
    return {
        "uuid": snapshot.node_uuid,
        "hypervisor_hostname": snapshot.hypervisor_hostname,
        "hypervisor_type": host.hypervisor_type if host else None,
        "hypervisor_version": host.hypervisor_version if host else None,
        "host_ip": host_ip,
        "vcpus": ledger.host_totals(host)[VCPU] if host else 0,
        # nova counts every vCPU of its instances here, pinned ones too.
        "vcpus_used": used.get(VCPU, 0) + used.get(PCPU, 0),
        "memory_mb": memory_mb,
        "memory_mb_used": memory_used,
        "free_ram_mb": memory_mb - memory_used,
        "local_gb": local_gb,
        "local_gb_used": local_used,
        "free_disk_gb": free_disk,
        "disk_available_least": least if least is not None else int(free_disk),
        "running_vms": snapshot.running_vms,
        "current_workload": stats.current_workload(snapshot.stats),
        "stats": dict(snapshot.stats),
        "cpu_allocation_ratio": _ratio(invs, VCPU),
        "ram_allocation_ratio": _ratio(invs, MEMORY_MB),
        "disk_allocation_ratio": _ratio(invs, DISK_GB),
        "cpu_info": cpu_info(host),
        "supported_instances": [list(s) for s in getattr(host, "supported_instances", ())],
        "metrics": metrics_list(metrics),
        "numa_topology": numa_topology(snapshot.numa_cells),
        "pci_device_pools": pools.as_nova_pools(
            pools.pools(snapshot.pci_devices), _pci_provider_of(snapshot, pci_in_placement)
        ),
        "updated_at": updated,
        **({"revision": revision} if revision is not None else {}),
    }


def _pci_provider_of(snapshot, in_placement):
    if not in_placement or not snapshot.node_uuid:
        return None
    return lambda address: pools.provider_uuid(snapshot.node_uuid, address)


def metrics_list(metrics):
    """nova's ``MonitorMetricList.to_list()``: ``[{name, timestamp, source,
    value}]``, what nova stores JSON-encoded in ``ComputeNode.metrics`` and
    its MetricsWeigher reads (percents as fractions, 37 -> 0.37)."""
    return [m.to_dict() for m in metrics]


def cpu_info(host):
    """nova's ``cpu_info`` JSON string: arch, model, vendor, topology and
    features of the host CPU (as far as the host driver reported them)."""
    if host is None:
        return json.dumps({})
    topology = getattr(host, "cpu_topology", None)
    info = {
        "arch": getattr(host, "cpu_arch", None),
        "model": getattr(host, "cpu_model", None),
        "vendor": getattr(host, "cpu_vendor", None),
        "topology": {
            "sockets": topology.sockets,
            "cores": topology.cores,
            "threads": topology.threads,
        }
        if topology
        else {},
        "features": sorted(getattr(host, "cpu_features", ()) or ()),
    }
    return json.dumps(info, sort_keys=True)


def _ratio(invs, rc):
    inv = invs.get(rc)
    return inv.allocation_ratio if inv is not None else None
