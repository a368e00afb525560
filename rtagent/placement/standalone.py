"""Standalone mode: the agent writes a claim's allocations itself.

A claim that arrives without Placement allocations (no Nova scheduler in
front) is accounted locally first, under the tracker lock, then written to
Placement outside it. If Placement refuses, the local claim is rolled back,
so the node and Placement never disagree for long.
"""

import logging

from rtagent.placement import errors

LOG = logging.getLogger(__name__)

WRITTEN = "written"
PRESENT = "present"


def write_allocations(
    client, consumer, allocations, *, project_id, user_id, consumer_type, also=()
):
    """Record a *new* consumer's allocations (consumer generation None).

    One PUT when the consumer is new. If Placement says the consumer exists,
    one GET tells a retry of this same write (identical allocations) from
    someone else's consumer.

    :param allocations: {provider uuid: {class: amount}}; zero amounts are
        dropped (Placement refuses them).
    :param also: other allocations that count as present when Placement
        holds them (not written).
    :returns: ``WRITTEN``, or ``PRESENT`` when Placement already held them.
    :raises AllocationRefused: Placement refused (capacity, a consumer
        holding other allocations, an unknown provider); nothing written.
    :raises PlacementUnavailable: the outcome is unknown.
    """
    wanted = _nonzero(allocations)
    if not wanted:
        return WRITTEN
    try:
        client.put_allocations(
            consumer,
            wanted,
            consumer_generation=None,
            project_id=project_id,
            user_id=user_id,
            consumer_type=consumer_type,
        )
        return WRITTEN
    except errors.GenerationConflict as exc:
        current = client.get_allocations(consumer)
        held = {rp: a["resources"] for rp, a in (current.get("allocations") or {}).items()}
        if held == wanted or any(held == _nonzero(other) for other in also):
            return PRESENT
        raise errors.AllocationRefused(
            consumer=consumer, reason=f"the consumer already holds {held}"
        ) from exc
    except errors.PlacementRequestFailed as exc:
        raise errors.AllocationRefused(
            consumer=consumer, reason=f"{exc.placement_code}: {exc.detail}"
        ) from exc


def _nonzero(allocations):
    found = {
        rp: {rc: amount for rc, amount in resources.items() if amount}
        for rp, resources in allocations.items()
    }
    return {rp: res for rp, res in found.items() if res}


def claim_standalone(
    tracker,
    client,
    instance_uuid,
    flavor,
    *,
    project_id,
    user_id,
    consumer_type="INSTANCE",
    pci_allocations=None,
    **claim_kwargs,
):
    """Claim locally, then write the allocation to Placement.

    ``tracker`` is the node's :class:`rtagent.tracker.tracker.Tracker`; the
    Placement write happens after its lock is released. While it is in
    flight the claim is *pending*: any other call on the instance (a second
    standalone claim, a plain claim, an abort) gets the retriable
    ``ClaimPending`` instead of a claim that this call might still roll
    back. So "granted" is only ever said of a claim nobody will undo.

    On a refusal the claim this call created is removed and forgotten
    (nothing of ours is in Placement). When Placement cannot be reached it
    is removed but stays *released*: if the write landed after all, healing
    removes it. A claim this call found already held is never undone.

    :param pci_allocations: callable(held devices) -> {provider: {class:
        amount}}, the allocations of the PCI devices the claim took (PCI
        reported in Placement), written with the claim's; None: not reported.
    :returns: the tracker's Claim.
    :raises ComputeResourcesUnavailable etc.: the local claim failed.
    :raises ClaimPending: another standalone claim of the instance is in flight.
    :raises AllocationRefused, PlacementUnavailable: rolled back.
    """
    claim = tracker.instance_claim(
        instance_uuid, flavor, project_id=project_id, pending=True, **claim_kwargs
    )
    allocations = {claim.node_uuid: dict(claim.resources)}
    before_attach = ()
    try:
        if pci_allocations is not None and claim.pci_devices:
            allocations.update(pci_allocations(claim.pci_devices))
            asked = tuple(d for d in claim.pci_devices if d.request_id in claim.request_ids)
            if not claim.created and len(asked) < len(claim.pci_devices):
                # A retry after an attach: Placement holds the attached
                # devices only from the next audit on.
                before = {claim.node_uuid: dict(claim.resources)}
                before.update(pci_allocations(asked) if asked else {})
                before_attach = (before,)
    except BaseException:
        # Nothing was sent: the claim goes, as on a refusal.
        if claim.token is not None:
            tracker.roll_back_pending(claim.instance_uuid, claim.token, forget=True)
        raise
    try:
        write_allocations(
            client,
            claim.instance_uuid,
            allocations,
            project_id=project_id or "",
            user_id=user_id,
            consumer_type=consumer_type,
            also=before_attach,
        )
    except errors.AllocationRefused:
        if claim.token is not None:
            tracker.roll_back_pending(claim.instance_uuid, claim.token, forget=True)
            LOG.info("Rolled back the claim of %s: Placement refused it", claim.instance_uuid)
        raise
    except BaseException:
        # Placement unreachable, or anything unexpected: the write may have
        # landed, so the claim is released (healing checks Placement).
        if claim.token is not None:
            tracker.roll_back_pending(claim.instance_uuid, claim.token)
            LOG.info(
                "Rolled back the claim of %s: its Placement write has no known outcome",
                claim.instance_uuid,
            )
        raise
    if claim.token is not None:
        tracker.settle_pending(claim.instance_uuid, claim.token)
    return claim
