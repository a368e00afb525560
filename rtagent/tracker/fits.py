"""What a claim on a node is checked against, and the checks: resources
by class (:func:`ensure_fits`) and the guest's NUMA cells
(:func:`ensure_numa_fits`). Pure functions of a
:class:`~rtagent.tracker.state.NodeState`.
"""

import dataclasses
import types

from rtagent.numa import model as numa_model
from rtagent.numa import running_pins as numa_running_pins
from rtagent.numa import usage as numa_usage
from rtagent.resources import MEMORY_MB, VCPU, frozen_map
from rtagent.tracker import assigned, errors, ledger, untracked


def _empty():
    return types.MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class FitContext:
    """What a claim is checked against, besides the state's own holdings.

    :param inventories: resource class -> Inventory (ratios resolved).
    :param extra_usage: resource mappings used outside any claim (untracked
        domains, when counted).
    :param offered: resource class -> identifiers the node offers.
    """

    inventories: types.MappingProxyType
    extra_usage: tuple = ()
    offered: types.MappingProxyType = dataclasses.field(default_factory=_empty)


def fit_context(state, count_untracked):
    """The :class:`FitContext` claims on ``state`` are checked against.

    :raises NodeNotReady: the host was never read.
    :raises HostUnavailable: the hypervisor cannot be read now.
    """
    if state.host is None:
        raise errors.NodeNotReady(node=state.node_uuid)
    if state.unavailable is not None:
        raise errors.HostUnavailable(node=state.node_uuid, reason=state.unavailable)
    extra = tuple(state.drift.untracked_usage()) if count_untracked else ()
    # Other hosts' allocations on a shared disk pool count as used, as
    # Placement counts them (never as reserved: the ratio applies to both).
    pool = state.pool_others()
    if not extra:
        return FitContext(inventories=state.inventories, extra_usage=pool, offered=state.offered)
    # Checked as Placement checks it when reserved: reserved, not used
    # (never both). get_status shows the same (rtagent.rpc.status).
    invs, counted = untracked.checked(
        state.inventories, ledger.usage([], extra), state.policy.reserve_untracked
    )
    return FitContext(
        inventories=frozen_map(invs),
        extra_usage=(extra if counted else ()) + pool,
        offered=state.offered,
    )


def ensure_fits(state, ctx, requested, *, limits, instance_uuid, assigned_request=None):
    """Check ``requested`` against the state's usage; pick assigned units.

    :returns: {rc: identifiers} chosen for ``assigned_request``.
    :raises ComputeResourcesUnavailable: it does not fit.
    """
    reasons = ledger.refusals(ctx.inventories, state.used(ctx.extra_usage), requested, limits)
    if reasons:
        raise errors.ComputeResourcesUnavailable(instance_uuid, reasons)
    if not assigned_request:
        return {}
    return assigned.pick_from(ctx.offered, state.ids_in_use(), assigned_request, instance_uuid)


def ensure_numa_fits(
    state, ctx, guest, *, instance_uuid, own_domain=False, running=None, accept=None, cell_rank=None
):
    """Place ``guest`` (a :class:`~rtagent.numa.constraints.GuestTopology`,
    or None) on the node's NUMA cells, given every NUMA claim the node
    holds; shared vCPUs and memory overcommit by the node's VCPU and
    MEMORY_MB ratios, pinned CPUs and pages never. Dedicated CPUs that
    other domains are pinned to without a claim keeping them are never
    pinned; with ``own_domain``, an instance whose domain already runs
    pinned may keep only the dedicated CPUs it is pinned to
    (:mod:`rtagent.numa.running_pins`), or of ``running`` (the CPUs its caller
    says it runs on) when given. ``accept(fits)`` picks among the layouts
    that fit (the claim's PCI devices must be had on them); when it accepts
    none, the first layout that fits is returned, and the PCI choice on it
    says why the claim cannot be had. ``cell_rank``: the order in which
    host cells are tried first (:func:`rtagent.numa.fit.fit`).

    :returns: a :class:`~rtagent.numa.usage.NumaClaim`, or None for no
        topology.
    :raises ComputeResourcesUnavailable: no host cell layout fits.
    """
    if guest is None:
        return None
    if not state.numa_cells:
        raise errors.ComputeResourcesUnavailable(
            instance_uuid, ["NUMA: the guest asks for a NUMA topology; the host reports no cells"]
        )
    own = None
    if own_domain:
        own = state.numa_pins.get(instance_uuid) if running is None else running
    if own is not None:
        dedicated = frozenset().union(*(c.pcpuset for c in state.numa_cells))
        running, own = own, own & dedicated
    cells = numa_running_pins.for_claim(
        state.numa_usage(), state.numa_unclaimed(), instance_uuid, own=own
    )
    limits = numa_model.Limits(
        cpu_allocation_ratio=_ratio(ctx.inventories, VCPU),
        ram_allocation_ratio=_ratio(ctx.inventories, MEMORY_MB),
    )
    isolate = guest.emulator_isolate
    pack = state.policy.numa_pack
    placed = None
    if accept is not None:
        placed = numa_usage.place(
            guest.cells,
            cells,
            limits,
            emulator_isolate=isolate,
            pack=pack,
            accept=accept,
            cell_rank=cell_rank,
        )
    if placed is None:
        placed = numa_usage.place(
            guest.cells, cells, limits, emulator_isolate=isolate, pack=pack, cell_rank=cell_rank
        )
    if placed is None:
        reason = numa_usage.refusal(guest.cells, cells, isolate)
        if own is not None:
            reason += (
                f"; the guest runs pinned to CPU(s) {_cpu_list(running)}, and only "
                f"the dedicated ones ({_cpu_list(own) or 'none'}) may be its claim's"
            )
        raise errors.ComputeResourcesUnavailable(instance_uuid, [reason])
    return placed


def _cpu_list(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def _ratio(inventories, rc):
    inv = inventories.get(rc)
    return inv.allocation_ratio if inv is not None and inv.allocation_ratio else 1.0
