# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The ComputeNode record nova's scheduler, API and conductor read, written
through nova's own objects.

Its hypervisor facts come from nova's virt driver (``get_available_resource``,
as nova-compute has always written them); its usage, stats and allocation
ratios come from the agent's compute-node view, so the record says what the
agent accounts. The record's UUID is the node's, the root provider's in
Placement.
"""

import logging

from nova import exception, objects
from oslo_serialization import jsonutils

from rtagent.nova import numa

LOG = logging.getLogger(__name__)

# The compute-node view's fields that are the agent's accounting.
USAGE_FIELDS = (
    "vcpus_used",
    "memory_mb_used",
    "local_gb_used",
    "free_ram_mb",
    "free_disk_gb",
    "running_vms",
    "current_workload",
)
RATIO_FIELDS = ("cpu_allocation_ratio", "ram_allocation_ratio", "disk_allocation_ratio")
# The host's sizes: the record's come from nova's virt driver, the ones
# Placement and the scheduler's filters hold from the agent.
SIZE_FIELDS = ("vcpus", "memory_mb", "local_gb")


def find_or_create(context, host, service_id, resources, initial_ratios):
    """The ComputeNode of ``resources['uuid']``: found (undeleted, and moved
    to ``host`` if another host had it) or created.

    :param initial_ratios: {field: ratio} for a new record (nova's
        ``initial_*_allocation_ratio``); the agent's view replaces them.
    :returns: (ComputeNode, created).
    """
    uuid = resources["uuid"]
    # The caller's context (nova-compute's, targeted at its cell), reading
    # deleted rows too: a node whose service was deleted is undeleted, as
    # nova's tracker does. A fresh admin context is not targeted: it would
    # miss the cell's row and create a second one (a UNIQUE error).
    try:
        cn = objects.ComputeNode.get_by_uuid(context.elevated(read_deleted="yes"), uuid)
    except exception.ComputeHostNotFound:
        cn = None
    if cn is not None:
        if cn.deleted:
            # Saved in the context that found it: the row is still deleted.
            LOG.info("Undeleting compute node %s", uuid)
            cn.deleted = False
            cn.deleted_at = None
            cn.save()
        cn._context = context
        if cn.host != host:
            # nova's wording, by node name (operators grep for it).
            LOG.info("ComputeNode %s moving from %s to %s", cn.hypervisor_hostname, cn.host, host)
            cn.host = host
        if service_id is not None:
            cn.service_id = service_id
        copy_driver_facts(cn, resources)
        cn.save()
        return cn, False
    cn = objects.ComputeNode(context)
    cn.host = host
    if service_id is not None:
        cn.service_id = service_id
    for field, ratio in initial_ratios.items():
        setattr(cn, field, ratio)
    cn.stats = {}
    copy_driver_facts(cn, resources)
    cn.create()
    LOG.info(
        "Compute node record created for %s:%s with uuid: %s", host, cn.hypervisor_hostname, uuid
    )
    return cn, True


def copy_driver_facts(cn, resources):
    """Copy the virt driver's facts (sizes, hypervisor, CPU info, ``uuid``).

    The driver's ``numa_topology`` (its cells without usage) is copied only
    onto a record that has none: afterwards :func:`apply_view` writes it
    with the agent's usage.
    """
    if cn.obj_attr_is_set("numa_topology") and cn.numa_topology:
        resources = {k: v for k, v in resources.items() if k != "numa_topology"}
    cn.update_from_virt_driver(resources)


def size_mismatch(resources, view, slack):
    """The sizes nova's virt driver (``resources``, its
    ``get_available_resource``) and the agent's ``view`` disagree on by
    more than ``slack`` ({field: amount}: the reserved amounts, which one
    side may have taken off), as "field driver/agent" texts; () if none."""
    found = []
    for field in SIZE_FIELDS:
        driver, agent = resources.get(field), view.get(field)
        if driver is None or agent is None:
            continue
        if abs(int(driver) - int(agent)) > slack.get(field, 0):
            found.append(f"{field} {int(driver)}/{int(agent)}")
    return tuple(found)


class SizeWarnings:
    """Warns, once per change, when nova's virt driver and the agent
    disagree on a host's sizes: os-hypervisors shows the driver's,
    Placement and the scheduler's filters the agent's (a daemon reading
    another host than nova's driver, or nova's fake driver)."""

    def __init__(self):
        self._last = {}  # node UUID -> the mismatch last warned of

    def check(self, nodename, resources, view, slack):
        """Compare the driver's ``resources`` with the agent's ``view``
        (see :func:`size_mismatch`) and warn of a change."""
        mismatch = size_mismatch(resources, view, slack)
        if mismatch == self._last.get(resources["uuid"], ()):
            return
        self._last[resources["uuid"]] = mismatch
        if mismatch:
            LOG.warning(
                "Node %s: nova's virt driver and the rtagent agent report different sizes "
                "(driver/agent): %s; nova's ComputeNode record (os-hypervisors) shows the "
                "driver's, Placement and the scheduler the agent's. Run nova-compute with "
                "the virt driver of the host the agent reads (docs/nova.md)",
                nodename,
                ", ".join(mismatch),
            )
        else:
            LOG.info("Node %s: nova's virt driver and the agent agree on sizes again", nodename)


def apply_view(cn, view, driver_numa=None, driver_stats=None, rewrite=False):
    """Put the agent's accounting (usage, stats, effective ratios, NUMA
    cells) and host metrics on ``cn``.

    :param view: the API's ``get_compute_node`` result.
    :param driver_numa: the virt driver's ``numa_topology`` (JSON), for
        what the agent's cells do not carry (sockets, network affinity).
    :param driver_stats: the ``stats`` of the virt driver's reading, under
        the agent's (nova's tracker starts each node's stats from them).
    :param rewrite: mark every field changed, equal or not, so that the
        save writes it. ``cn`` holds what was last saved through it, not
        what the row holds: a write from elsewhere (a stock nova-compute's
        last one landing after the agent took over) or one lost is only
        put right by writing again. The periodic does; a save after each
        claim writes only what changed.
    """
    for field in USAGE_FIELDS:
        value = view.get(field)
        if value is not None:
            setattr(cn, field, int(value))
    for field in RATIO_FIELDS:
        if view.get(field) is not None:
            setattr(cn, field, float(view[field]))
    stats = {
        str(k): None if v is None else str(v)
        for k, v in {**(driver_stats or {}), **(view.get("stats") or {})}.items()
    }
    if rewrite or stats != (cn.stats if cn.obj_attr_is_set("stats") else None):
        cn.stats = stats
    if "numa_topology" in view:  # an agent older than 1.3: leave it be
        topology = numa.compute_node_topology(driver_numa, view["numa_topology"])
        if rewrite or topology != (
            cn.numa_topology if cn.obj_attr_is_set("numa_topology") else None
        ):
            cn.numa_topology = topology
    if "pci_device_pools" in view:  # an agent older than the field: leave them be
        pools = pci_pools(view["pci_device_pools"])
        have = cn.pci_device_pools if cn.obj_attr_is_set("pci_device_pools") else None
        if rewrite or have is None or _pool_dicts(have) != _pool_dicts(pools):
            cn.pci_device_pools = pools
    if "metrics" in view:  # an agent older than the field: leave them be
        metrics = metrics_json(view["metrics"])
        if rewrite or metrics != (cn.metrics if cn.obj_attr_is_set("metrics") else None):
            cn.metrics = metrics


def pci_pools(view_pools):
    """A ``PciDevicePoolList`` of the view's ``pci_device_pools`` (the
    agent's free devices, as nova's scheduler reads them)."""
    return objects.PciDevicePoolList(
        objects=[
            objects.PciDevicePool(
                vendor_id=p["vendor_id"],
                product_id=p["product_id"],
                numa_node=p.get("numa_node"),
                count=int(p["count"]),
                tags=dict(p.get("tags") or {}),
            )
            for p in view_pools or ()
        ]
    )


def _pool_dicts(pool_list):
    return [p.to_dict() for p in pool_list or ()]


def metrics_json(metrics):
    """``ComputeNode.metrics`` as nova's resource tracker writes it:
    ``jsonutils.dumps(MonitorMetricList.to_list())``, ``"[]"`` for none (what
    nova writes without compute_monitors). Keys in ``to_dict()``'s order, so
    the string is the one nova would store."""
    return jsonutils.dumps(
        [
            {
                "name": m["name"],
                "timestamp": m["timestamp"],
                "source": m["source"],
                "value": m["value"],
            }
            for m in metrics or ()
        ]
    )


def save_if_changed(cn):
    """``cn.save()`` when a field changed (only changed fields are written,
    so fields others own, such as ``mapped``, are never overwritten)."""
    if cn.obj_what_changed():
        cn.save()
