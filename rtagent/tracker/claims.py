"""Instance claims and instance updates as pure state transitions."""

from rtagent.pci import held as pci_held
from rtagent.resources import frozen_map
from rtagent.tracker import errors, ledger, requests
from rtagent.tracker.fits import ensure_fits, ensure_numa_fits
from rtagent.tracker.model import releases
from rtagent.tracker.pciholds import DeviceChoice, cell_rank
from rtagent.tracker.pciholds import ensure_fits as ensure_pci_fits


def claim_instance(
    state,
    ctx,
    instance,
    limits=None,
    assigned_request=None,
    *,
    guest=None,
    pci_requests=(),
    running_cpus=None,
    running_devices=None,
):
    """``state`` with ``instance`` claimed on the node.

    :param guest: the instance's NUMA topology
        (:class:`~rtagent.numa.constraints.GuestTopology`), or None: its
        cells are placed on the host's, pinning CPUs and taking pages.
    :param pci_requests: :class:`~rtagent.pci.pools.PciRequest` values: free
        devices are chosen for them (on the guest's cells, as each
        request's NUMA policy says) and held by the instance.
    :param running_cpus: the host CPUs the guest already runs pinned on
        (a frozenset), or None for those its domain's ``<cputune>`` names:
        its pinned vCPUs may keep only the dedicated ones of these.
    :param running_devices: {request id: addresses} of the devices the
        guest already runs with (an instance claimed after the fact): those
        requests take exactly these, or the claim is refused.

    A repeated claim returns ``state`` unchanged (callers may retry) when
    the instance holds the same resources and cells and, for each PCI
    request id it names, as many devices as it asks: devices held for ids
    it does not name are those attached since (:func:`attach_devices`),
    which do not make a retry another claim.

    :raises ComputeResourcesUnavailable: it does not fit.
    :raises DevicesUnavailable: the PCI requests cannot be met.
    :raises InstanceClaimConflict: the instance holds different resources
        or cells, another number of devices for a request id asked (none:
        never claimed, or detached since), or is in a move on this node.
    :raises ClaimPending: a standalone claim of the instance is in flight.
    """
    state.check_not_pending(instance.uuid)
    if ledger.pins_on_shared(state.host, state.policy):
        # nova's upgrade fallback: the pinned vCPUs are allocated as VCPU.
        counted = requests.on_shared_cpus(instance.resources, guest)
        if counted != dict(instance.resources):
            instance = instance.replace(resources=frozen_map(counted))
    existing = state.instances.get(instance.uuid)
    if existing is not None:
        if (
            dict(existing.resources) == dict(instance.resources)
            and _same_cells(existing, guest)
            and _holds_requested(existing, pci_requests)
        ):
            return state
        raise errors.InstanceClaimConflict(
            instance_uuid=instance.uuid,
            existing=_described(dict(existing.resources), pci_held.counts(existing.pci_devices)),
            requested=_described(dict(instance.resources), pci_held.requested_counts(pci_requests)),
        )
    if state.migrations_of(instance.uuid):
        raise errors.InstanceClaimConflict(
            instance_uuid=instance.uuid,
            existing="a move in progress on this node",
            requested=dict(instance.resources),
        )
    chosen = ensure_fits(
        state,
        ctx,
        dict(instance.resources),
        limits=limits,
        instance_uuid=instance.uuid,
        assigned_request=assigned_request,
    )
    devices = DeviceChoice(state, pci_requests, running_devices)
    numa = None
    if guest is not None:
        # A guest already running pinned (claimed after the fact) keeps its CPUs.
        numa = ensure_numa_fits(
            state,
            ctx,
            guest,
            instance_uuid=instance.uuid,
            own_domain=True,
            running=running_cpus,
            accept=devices.allows if pci_requests else None,
            cell_rank=cell_rank(state, pci_requests),
        )
    pci = devices.take(numa)
    if chosen or numa is not None or pci:
        instance = instance.replace(assigned=frozen_map(chosen), numa=numa, pci_devices=pci)
    return state.with_instance(instance)


def _holds_requested(existing, pci_requests):
    """Whether ``existing`` holds, for every request id of
    ``pci_requests``, the number of devices asked (the rule a repeated
    attach follows too). Not "exactly these requests": the instance keeps
    no record of which of its devices an attach added, and a caller that
    sends its instance's requests as they are now (an attached port's
    among them) asks for what it holds as much as the original call."""
    held = pci_held.counts(existing.pci_devices)
    asked = pci_held.requested_counts(pci_requests)
    return all(held.get(rid) == n for rid, n in asked.items())


def _same_cells(existing, guest):
    held = existing.numa.guest_cells if existing.numa is not None else None
    return held == (tuple(guest.cells) if guest is not None else None)


def _described(resources, pci_counts):
    """Resources, and PCI requests when there are any (for a conflict)."""
    if not pci_counts:
        return resources
    return f"{resources} and PCI requests {dict(sorted(pci_counts.items()))}"


def remove_instance(state, instance_uuid, token=None, deleted=False):
    """``state`` without the instance and without its moves on this node.

    :param token: the pending token of the standalone claim being rolled
        back, when that is what removes it.
    :param deleted: the instance is deleted for good (its allocations are
        healed at the first look).
    :raises ClaimPending: someone else's standalone claim is in flight.
    """
    state.check_not_pending(instance_uuid, token)
    state = state.without_instance(instance_uuid, deleted).without_pending(instance_uuid)
    return state.without_migrations(m.uuid for m in state.migrations_of(instance_uuid))


def update_instance(
    state, instance_uuid, vm_state=None, task_state=None, set_task=False, *, others=None
):
    """Record nova state changes; a deleted or shelved-offloaded instance
    releases its usage (and its record) here.

    :param set_task: True to set ``task_state`` even to None (nova clears
        task_state by setting it to None).
    :param others: ``os_type`` and ``project_id`` to set (the keys
        present; an ``os_type`` of None clears it).
    :raises InstanceNotFound: the instance is not on this node.
    :raises ClaimPending: a standalone claim of the instance is in flight.
    """
    state.check_not_pending(instance_uuid)
    instance = state.instances.get(instance_uuid)
    if instance is None:
        raise errors.InstanceNotFound(instance_uuid=instance_uuid, node=state.node_uuid)
    task_after = task_state if task_state is not None or set_task else instance.task_state
    if vm_state is not None and releases(vm_state, task_after):
        return remove_instance(state, instance_uuid, deleted=vm_state == "deleted")
    changes = {}
    if vm_state is not None:
        changes["vm_state"] = vm_state
    if task_state is not None or set_task:
        changes["task_state"] = task_state
    changes.update(others or {})
    if all(getattr(instance, key) == value for key, value in changes.items()):
        return state  # nothing new: no write
    return state.with_instance(instance.replace(**changes))


def attach_devices(state, instance_uuid, pci_requests):
    """``state`` with devices for ``pci_requests`` added to an instance's
    claim (an interface attached to a running guest): chosen as a claim
    chooses them, on the instance's NUMA cells when it has a NUMA claim.

    A repeated attach of the same request ids and counts returns ``state``
    unchanged (callers may retry).

    :raises InstanceNotFound: the instance is not on this node.
    :raises DevicesConflict: a request id the instance already holds
        devices for, with another count; or a move of it is in progress on
        this node (its devices are the move's then).
    :raises DevicesUnavailable: the requests cannot be met.
    :raises ClaimPending: a standalone claim of the instance is in flight.
    """
    state.check_not_pending(instance_uuid)
    instance = _tracked(state, instance_uuid)
    held = pci_held.counts(instance.pci_devices)
    asked = pci_held.requested_counts(pci_requests)
    if all(held.get(rid) == n for rid, n in asked.items()):
        return state
    clash = sorted(rid for rid in asked if rid in held)
    if clash:
        raise errors.DevicesConflict(
            instance_uuid=instance_uuid,
            reason=f"it holds devices for the PCI request(s) {clash} already, "
            f"{dict(sorted(held.items()))}, not {dict(sorted(asked.items()))} "
            "(detach them first, or use other request ids)",
        )
    _not_moving(state, instance_uuid)
    chosen = ensure_pci_fits(state, pci_requests, instance.numa)
    return state.with_instance(instance.replace(pci_devices=instance.pci_devices + chosen))


def detach_devices(state, instance_uuid, addresses):
    """``state`` without the instance's devices at ``addresses`` (an
    interface detached). Addresses it does not hold are ignored, so a
    repeated detach changes nothing.

    :returns: ``(state, released addresses in the instance's order)``.
    :raises InstanceNotFound: the instance is not on this node.
    :raises DevicesConflict: a move of it is in progress on this node.
    :raises ClaimPending: a standalone claim of the instance is in flight.
    """
    state.check_not_pending(instance_uuid)
    instance = _tracked(state, instance_uuid)
    wanted = frozenset(addresses)
    released = tuple(h.address for h in instance.pci_devices if h.address in wanted)
    if not released:
        return state, ()
    _not_moving(state, instance_uuid)
    kept = tuple(h for h in instance.pci_devices if h.address not in wanted)
    return state.with_instance(instance.replace(pci_devices=kept)), released


def _not_moving(state, instance_uuid):
    """:raises DevicesConflict: a move of the instance is in progress here
    (its devices are the move's then, changed only by its steps)."""
    if state.migrations_of(instance_uuid):
        raise errors.DevicesConflict(
            instance_uuid=instance_uuid,
            reason="a move of it is in progress on this node; its devices change "
            "only with the move's steps",
        )


def _tracked(state, instance_uuid):
    instance = state.instances.get(instance_uuid)
    if instance is None:
        raise errors.InstanceNotFound(instance_uuid=instance_uuid, node=state.node_uuid)
    return instance
