"""Usage and fit as pure functions of host, policy and tracked instances.

No locks, no I/O, no clocks: every function here takes values and returns
values, so the tests are plain tables and the tracker can compute a whole
new state before it commits any of it.
"""

import dataclasses
import math
import types

from rtagent.resources import PCPU
from rtagent.tracker import errors
from rtagent.tracker.model import (
    DEFERRED_LIMIT_KEYS,
    DISK_GB,
    LIMIT_KEYS,
    MEMORY_MB,
    STANDARD_CLASSES,
    VCPU,
    Inventory,
    frozen_map,
)

# Ratios that are not the operator's to choose: a dedicated CPU runs one
# guest vCPU, whatever the configuration or Placement say (nova reports 1).
FIXED_RATIOS = frozen_map({PCPU: 1.0})


@dataclasses.dataclass(frozen=True)
class ResourcePolicy:
    """Reserved amounts and allocation ratios, as configured.

    :param ratios: resource class -> configured ratio, or None when the
        operator left it unset (then Placement's value is respected).
    :param initial_ratios: resource class -> ratio used when an inventory is
        first created and no ratio is configured.
    :param reserve_untracked: counted untracked domains' usage is reserved
        (in Placement and in the agent's own checks) rather than counted as
        used by the agent alone; see :mod:`.untracked`.
    :param reserved_huge_pages: pages kept for the host, ``((NUMA cell id,
        page size KiB, count), ...)`` sorted (``[DEFAULT]
        reserved_huge_pages``, from :func:`rtagent.virt.hugepages.parse`).
    :param numa_pack: NUMA guests go to the most used host cells first
        (nova's ``packing_host_numa_cells_allocation_strategy``); False
        spreads them, least used first.
    :param pinning_fallback: on a host without ``cpu_dedicated_set``,
        pinned guests pin the shared CPUs and count their vCPUs as VCPU
        (nova's upgrade fallback, see :func:`pins_on_shared`). The caller
        leaves it False where nova keeps no fallback (``cpu_shared_set``
        alone, or nova's ``[workarounds] disable_fallback_pcpu_query``).
    """

    reserved_host_cpus: int = 0
    reserved_host_memory_mb: int = 512
    reserved_host_disk_mb: int = 0
    reserved_huge_pages: tuple = ()
    ratios: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    initial_ratios: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: frozen_map({VCPU: 4.0, MEMORY_MB: 1.0, DISK_GB: 1.0})
    )
    reserve_untracked: bool = True
    numa_pack: bool = False
    pinning_fallback: bool = False

    def reserved(self, rc):
        if rc == VCPU:
            return self.reserved_host_cpus
        if rc == MEMORY_MB:
            return self.reserved_host_memory_mb
        if rc == DISK_GB:
            # Placement counts disk in whole GiB; nova rounds the reservation up.
            return math.ceil(self.reserved_host_disk_mb / 1024)
        return 0

    def managed_ratio(self, rc):
        """The configured ratio of ``rc``, or None when unset (a fixed
        ratio, PCPU's, always counts as configured)."""
        if rc in FIXED_RATIOS:
            return FIXED_RATIOS[rc]
        return self.ratios.get(rc)

    def effective_ratio(self, rc, placement_ratio=None):
        """The ratio claims are checked with: configured, else Placement's
        (an operator may have set it through the API), else the initial one."""
        configured = self.managed_ratio(rc)
        if configured is not None:
            return configured
        if placement_ratio is not None:
            return placement_ratio
        return self.initial_ratios.get(rc, 1.0)


def host_totals(host):
    """Resource class -> total the host offers (0 when absent).

    CPUs as nova's libvirt driver counts them: PCPU is
    ``cpu_dedicated_set``; VCPU is ``cpu_shared_set``, or every online CPU
    when neither set is given, or none when only the dedicated set is.
    """
    shared, dedicated = host.cpu_shared_set, host.cpu_dedicated_set
    if shared is not None:
        vcpus = len(shared)
    elif dedicated:
        vcpus = 0
    else:
        vcpus = host.vcpus
    return {
        VCPU: vcpus,
        PCPU: len(dedicated or ()),
        MEMORY_MB: host.memory_mb,
        # A pool shared by several hosts is published once, on a sharing
        # provider (rtagent.tracker.pooldisk), never on the root.
        DISK_GB: 0 if getattr(host, "disk_pool", None) and host.disk_pool.shared else host.local_gb,
    }


def pins_on_shared(host, policy):
    """Whether pinned guests pin the shared CPUs of ``host`` and count
    their vCPUs as VCPU: nova's upgrade fallback, on a host without
    ``cpu_dedicated_set`` (no PCPU inventory) when ``policy`` keeps it."""
    return bool(policy.pinning_fallback and host is not None and not host.cpu_dedicated_set)


def inventories(host, policy, placement_ratios=None, resolve_ratios=True):
    """Inventories of the classes the agent derives for ``host``
    (:func:`host_totals`): PCPU reserves nothing and has ratio 1.0.

    A class with total 0 is left out: Placement refuses an inventory whose
    total is below 1. A reservation larger than the total is clamped to the
    total (capacity 0) rather than sent, which Placement would reject.

    :param placement_ratios: resource class -> ratio currently in Placement.
    :param resolve_ratios: True for the ratios claims are checked with;
        False for the desired Placement view, where an unmanaged ratio is
        None (keep Placement's).
    :returns: dict of resource class -> :class:`Inventory`.
    """
    placement_ratios = placement_ratios or {}
    result = {}
    for rc, total in host_totals(host).items():
        if total < 1:
            continue
        if resolve_ratios:
            ratio = policy.effective_ratio(rc, placement_ratios.get(rc))
        else:
            ratio = policy.managed_ratio(rc)
        result[rc] = Inventory(
            total=total,
            reserved=min(policy.reserved(rc), total),
            min_unit=1,
            max_unit=total,
            step_size=1,
            allocation_ratio=ratio,
        )
    return result


def requested_resources(flavor, volume_backed=False):
    """What an instance of ``flavor`` takes from the node.

    A volume-backed instance's root disk lives on the volume service, not on
    the host, so it uses no local root disk. Swap (MiB) counts as disk,
    rounded up to GiB as nova does.
    """
    disk = (0 if volume_backed else flavor.root_gb) + flavor.ephemeral_gb
    disk += math.ceil(flavor.swap_mb / 1024)
    requested = {VCPU: flavor.vcpus, MEMORY_MB: flavor.memory_mb, DISK_GB: disk}
    return {rc: amount for rc, amount in requested.items() if amount > 0}


def latest_migrations(migrations):
    """instance UUID -> the most recently updated of its migrations.

    Several moves of one instance can be on record (a retried resize, a
    stale record); like nova, only the latest one counts.
    """
    latest = {}
    for migration in migrations:
        current = latest.get(migration.instance_uuid)
        if current is None or migration.seq > current.seq:
            latest[migration.instance_uuid] = migration
    return latest


def holdings(node_uuid, instances, migrations):
    """What ``node_uuid`` holds: a list of (resources, assigned) pairs.

    * an instance on this node holds its flavor;
    * an incoming move not yet finished holds the new flavor at the
      destination; once the instance has left, an outgoing move holds the
      old flavor at the source until it is confirmed or reverted;
    * a same-node resize holds both flavors, old and new, until it is
      confirmed or reverted: the host really holds both (the old disk stays
      beside the new one until confirm), and Placement and nova's tracker
      count both.

    :param instances: mapping of instance UUID -> Instance on this node.
    :param migrations: iterable of Migration records involving this node.
    """
    replacing, others = move_holdings(node_uuid, instances, migrations)
    held = [replacing.get(i.uuid) or (i.resources, i.assigned) for i in instances.values()]
    return held + others


def move_holdings(node_uuid, instances, migrations):
    """The part of :func:`holdings` that moves decide, in O(moves).

    :returns: ({instance UUID: its holding} for instances living here whose
        same-node resize counts instead of their flavor, [holdings of moves
        whose instance does not live here]).
    """
    replacing, others = {}, []
    for move in latest_migrations(migrations).values():
        instance = instances.get(move.instance_uuid)
        if instance is not None:
            if move.same_node:
                replacing[instance.uuid] = (
                    _per_class_sum(move.old_resources, move.new_resources),
                    _union_ids(instance.assigned, move.old_assigned, move.new_assigned),
                )
            continue  # otherwise the instance counts with its own flavor
        if move.same_node:
            others.append(
                (
                    _per_class_sum(move.old_resources, move.new_resources),
                    _union_ids(move.old_assigned, move.new_assigned),
                )
            )
        elif move.dest_node == node_uuid:
            others.append((move.new_resources, move.new_assigned))
        elif move.source_node == node_uuid:
            others.append((move.old_resources, move.old_assigned))
    return replacing, others


def usage(held, extra=()):
    """Resource class -> total amount in ``held`` (from :func:`holdings`).

    :param extra: more resource mappings to add (e.g. untracked domains).
    """
    used = dict.fromkeys(STANDARD_CLASSES, 0)
    for resources in [r for r, _ in held] + list(extra):
        for rc, amount in resources.items():
            used[rc] = used.get(rc, 0) + amount
    return used


def instance_usage(instances):
    """Usage of plain instances (no moves): a convenience for callers and tests."""
    return usage([(i.resources, i.assigned) for i in instances])


def _per_class_sum(a, b):
    return {rc: a.get(rc, 0) + b.get(rc, 0) for rc in set(a) | set(b)}


def _union_ids(*assigned):
    merged = {}
    for mapping in assigned:
        for rc, ids in mapping.items():
            merged[rc] = tuple(sorted(set(merged.get(rc, ())) | set(ids)))
    return merged


def check_limits(limits):
    """Validate a scheduler ``limits`` dict; return resource class -> limit.

    :raises InvalidClaimRequest: unknown key or a negative / non-numeric limit.
    """
    result = {}
    for key, value in (limits or {}).items():
        if key in DEFERRED_LIMIT_KEYS:
            continue
        if key not in LIMIT_KEYS:
            raise errors.InvalidClaimRequest(reason=f"unknown limit {key!r}")
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise errors.InvalidClaimRequest(reason=f"limit {key} must be >= 0, got {value!r}")
        result[LIMIT_KEYS[key]] = value
    return result


def refusals(inventories, used, requested, limits=None):
    """Why ``requested`` does not fit; an empty list when it fits.

    The checks are Placement's (capacity = (total - reserved) x ratio,
    min_unit, max_unit, step_size) plus the scheduler's optional limits on
    total use, which nova passes with each build request.

    :param limits: resource class -> maximum total use (from
        :func:`check_limits`).
    """
    reasons = []
    limits = limits or {}
    for rc, amount in sorted(requested.items()):
        inv = inventories.get(rc)
        if inv is None:
            reasons.append(f"{rc}: requested {amount}, the node has no {rc} inventory")
            continue
        in_use = used.get(rc, 0)
        if amount < inv.min_unit or amount > inv.max_unit:
            reasons.append(
                f"{rc}: requested {amount}, outside the unit bounds "
                f"[{inv.min_unit}, {inv.max_unit}]"
            )
        elif amount % inv.step_size:
            reasons.append(f"{rc}: requested {amount}, not a multiple of {inv.step_size}")
        if in_use + amount > inv.capacity:
            reasons.append(
                f"{rc}: requested {amount}, free {_fmt(inv.capacity - in_use)} "
                f"of capacity {_fmt(inv.capacity)}"
            )
        limit = limits.get(rc)
        # nova's claim tests count the host's reserved memory and disk as
        # used against these limits (its memory_mb_used starts at the
        # reservation); reserved CPUs are not counted in vcpus_used.
        limit_use = in_use + (inv.reserved if rc in (MEMORY_MB, DISK_GB) else 0)
        if limit is not None and limit_use + amount > limit:
            reasons.append(
                f"{rc}: requested {amount}, free {_fmt(limit - limit_use)} "
                f"under the scheduler limit {_fmt(limit)}"
            )
    return reasons


def _fmt(number):
    return f"{number:g}" if isinstance(number, float) else str(number)
