"""The node's status as one JSON-able dict: what ``rtagent status`` shows,
``get_status`` answers and the health endpoint serves. Pure over a
snapshot."""

import time

from rtagent.pci import pools


def printable(text):
    """``text`` safe for a terminal or a log line: every character that is
    not printable (controls, bidirectional controls, separators, surrogates,
    unassigned code points) and the backslash itself are written as Python
    escapes (``\\x1b``, ``\\u202e``, ``\\n``, ``\\\\``); the rest is kept."""
    text = str(text)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join("\\\\" if c == "\\" else c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable_tree(value):
    """A copy of a JSON-able ``value`` whose strings (values and keys) are
    :func:`printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [printable_tree(v) for v in value]
    return value


def node_status(snapshot, sync=None, now=None):
    """The status of one node.

    :param snapshot: a :class:`rtagent.tracker.model.NodeSnapshot`.
    :param sync: a dict of the node's sync state (see the daemon), or None.
    :param now: wall-clock seconds, for ages (default: now).
    """
    now = time.time() if now is None else now
    resources = {}
    for rc, inv in sorted(snapshot.inventories.items()):
        capacity = inv.capacity
        used = snapshot.usage.get(rc, 0)
        resources[rc] = {
            "total": inv.total,
            "reserved": inv.reserved,
            "allocation_ratio": inv.allocation_ratio,
            "capacity": capacity,
            "used": used,
            "free": capacity - used,
        }
    drift = snapshot.drift
    return {
        "node_uuid": snapshot.node_uuid,
        "hypervisor_hostname": snapshot.hypervisor_hostname,
        "disabled": snapshot.disabled,
        "unavailable": snapshot.unavailable,
        "resources": resources,
        "instances": len(snapshot.instances),
        # Which: a caller reconciling with its own records (nova's tracker
        # adapter) needs them, not only their number.
        "instance_uuids": [i.uuid for i in snapshot.instances],
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
        "pci": {
            "devices": len(snapshot.pci_devices),
            "pools": pools.as_nova_pools(pools.pools(snapshot.pci_devices)),
            "claimed": _pci_claimed(snapshot),
        },
        "sync": dict(sync) if sync else None,
        "generated_at": now,
    }


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
