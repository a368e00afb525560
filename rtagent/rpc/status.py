"""The node's status as one JSON-able dict: what ``rtagent status`` shows,
``get_status`` answers and the health endpoint serves. Pure over a
snapshot."""

import dataclasses
import time

from rtagent.excerpt import escaped_tree, printable
from rtagent.pci import pools
from rtagent.placement import desired, shared_pool
from rtagent.tracker import untracked


def printable_tree(value):
    """A copy of a JSON-able ``value`` whose strings (values and keys) are
    :func:`~rtagent.excerpt.printable`."""
    return escaped_tree(value, printable)


def node_status(snapshot, sync=None, now=None):
    """The status of one node.

    :param snapshot: a :class:`rtagent.tracker.model.NodeSnapshot`.
    :param sync: a dict of the node's sync state (see the daemon), or None.
    :param now: wall-clock seconds, for ages (default: now).
    """
    now = time.time() if now is None else now
    drift = snapshot.drift
    return {
        "node_uuid": snapshot.node_uuid,
        "hypervisor_hostname": snapshot.hypervisor_hostname,
        "disabled": snapshot.disabled,
        "unavailable": snapshot.unavailable,
        "resources": _resources(snapshot),
        "instances": len(snapshot.instances),
        # Which: a caller reconciling with its own records (nova's tracker
        # adapter) needs them, not only their number.
        "instance_uuids": [i.uuid for i in snapshot.instances],
        # Nova's states the node holds (the scheduler's stats count them):
        # a caller keeps them current by difference.
        "instance_states": {
            i.uuid: {
                "vm_state": i.vm_state,
                "task_state": i.task_state,
                "os_type": i.os_type,
                "project_id": i.project_id,
            }
            for i in snapshot.instances
        },
        "moves": [
            {
                "migration_uuid": m.uuid,
                "instance_uuid": m.instance_uuid,
                "migration_type": m.migration_type,
                "status": m.status,
                "source_node": m.source_node,
                "dest_node": m.dest_node,
            }
            for m in snapshot.migrations
        ],
        "drift": {
            "untracked_domains": [
                {"uuid": d.uuid, "name": d.name} for d in (drift.untracked if drift else ())
            ],
            "missing_instances": list(drift.missing if drift else ()),
            "pci_devices_held": [
                {"address": h.address, "owner": h.owner, "domain": h.domain_name}
                for h in snapshot.pci_held
            ],
        },
        "numa": _numa(snapshot),
        "disk_pool": _disk_pool(snapshot),
        "pci": {
            "devices": len(snapshot.pci_devices),
            "pools": pools.as_nova_pools(pools.pools(snapshot.pci_devices)),
            "claimed": _pci_claimed(snapshot),
        },
        "sync": dict(sync) if sync else None,
        "generated_at": now,
    }


def _disk_pool(snapshot):
    """The storage pool of the guests' disks (None without one): its
    figures, whether they are stale and since when, and the instances of
    this node whose disks are in it."""
    pool = getattr(snapshot.host, "disk_pool", None) if snapshot.host is not None else None
    if pool is None:
        return None
    mine = {i.uuid for i in snapshot.instances}
    usage = snapshot.pool_usage
    return {
        "pool": pool.pool,
        "shared": pool.shared,
        "provider_uuid": pool.provider_uuid if pool.shared else None,
        "aggregate_uuid": pool.aggregate_uuid if pool.shared else None,
        "total_gb": pool.total_gb,
        "used_gb": pool.used_gb,
        "read_at": pool.read_at,
        "stale": pool.stale_since is not None,
        "stale_since": pool.stale_since,
        "error": pool.error,
        # Disks nova made in the pool for this node's instances: theirs,
        # not untracked usage.
        "instance_disks_here": len(mine & pool.instance_disks),
        "instance_disks_elsewhere": len(pool.instance_disks - mine),
        "other_images": pool.other_images,
        "others_gb": usage.others_gb if usage is not None and pool.shared else None,
    }


def _resources(snapshot):
    """Per resource class: the host's inventory and what claims and
    counted untracked domains use (the fields of API 1.0); ``claims``, the
    figures a claim is checked against (as
    :func:`rtagent.tracker.fits.fit_context` and
    :func:`rtagent.tracker.ledger.refusals` compute them); ``placement``,
    the inventory the agent sends Placement."""
    policy = snapshot.policy
    reserve = policy.reserve_untracked if policy is not None else False
    checked, counted = untracked.checked(snapshot.inventories, snapshot.untracked_usage, reserve)
    published = _published(snapshot)
    resources = {}
    for rc, inv in sorted(snapshot.inventories.items()):
        capacity = inv.capacity
        used = snapshot.usage.get(rc, 0)
        fit = checked[rc]
        # snapshot.usage counts untracked domains whenever they are counted;
        # claims count them as used only when they are not reserved.
        fit_used = used if counted else used - snapshot.untracked_usage.get(rc, 0)
        resources[rc] = {
            "total": inv.total,
            "reserved": inv.reserved,
            "allocation_ratio": inv.allocation_ratio,
            "capacity": capacity,
            "used": used,
            "free": capacity - used,
            "claims": {
                "reserved": fit.reserved,
                "capacity": fit.capacity,
                "used": fit_used,
                "free": fit.capacity - fit_used,
                "max_unit": fit.max_unit,
            },
            "placement": published.get(rc),
        }
    return resources


def _published(snapshot):
    """resource class -> the root provider's inventory as the agent sends
    it to Placement (:func:`rtagent.placement.desired.root_provider`), a
    ratio it leaves to Placement shown as the one it last read there; a
    shared disk pool's DISK_GB as it is sent to the pool's provider."""
    if snapshot.host is None or snapshot.policy is None:
        return {}
    found = {}
    sent_invs = dict(desired.root_provider(snapshot).inventories)
    pool = shared_pool.pool_provider(snapshot)
    if pool is not None:
        sent_invs.update(pool.inventories)
    for rc, sent in sent_invs.items():
        inv = sent
        if sent.allocation_ratio is None and rc in snapshot.inventories:
            inv = dataclasses.replace(
                sent, allocation_ratio=snapshot.inventories[rc].allocation_ratio
            )
        found[rc] = {
            "total": inv.total,
            "reserved": inv.reserved,
            "allocation_ratio": inv.allocation_ratio,
            "capacity": inv.capacity,
        }
    return found


def _pci_claimed(snapshot):
    """The devices claims hold, with their owner instance (the devices a
    domain holds without a claim are ``drift.pci_devices_held``)."""
    marks = {(h.address, h.owner) for h in snapshot.pci_held}
    return [
        {
            "address": d.address,
            "owner": d.instance_uuid,
            "request_id": d.request_id,
            "status": d.status,
            "gone": d.gone,
        }
        for d in snapshot.pci_devices
        if d.held and (d.address, d.instance_uuid) not in marks
    ]


def _numa(snapshot):
    """Per cell: dedicated CPUs and who keeps them, huge pages; and the
    claims that keep CPUs no longer dedicated. None without cells."""
    if not snapshot.numa_cells and not snapshot.numa_lost:
        return None
    owners = {}
    for consumer, claim in snapshot.numa_claims:
        for cpu in claim.pinned:
            owners[cpu] = consumer
    return {
        "cells": [
            {
                "id": cell.id,
                "dedicated_cpus": sorted(cell.pcpuset),
                "pinned": {str(cpu): owners.get(cpu) for cpu in sorted(cell.pinned)},
                "memory_mb": cell.memory_mb,
                "memory_used_mb": cell.memory_usage,
                "huge_pages": [
                    {"size_kb": p.size_kb, "total": p.total, "used": p.used, "reserved": p.reserved}
                    for p in cell.pages[1:]
                ],
            }
            for cell in snapshot.numa_cells
        ],
        "lost_cpus": {consumer: list(cpus) for consumer, cpus in snapshot.numa_lost.items()},
        "unclaimed_cpus": {uuid: list(cpus) for uuid, cpus in snapshot.numa_unclaimed.items()},
    }
