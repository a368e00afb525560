"""Assigned resources: units claimed by identifier, not only by count.

Some resources are specific things (a vGPU, a persistent-memory namespace):
the provider offers a list of identifiers for the class, a claim takes
free ones, and a drop gives them back. Pure functions over what is offered
and what is held.
"""

from rtagent.tracker import errors


def in_use(held):
    """Resource class -> set of identifiers held (see ledger.holdings)."""
    used = {}
    for _, assigned in held:
        for rc, ids in assigned.items():
            used.setdefault(rc, set()).update(ids)
    return used


def pick(offered, held, request, instance_uuid):
    """Choose identifiers for ``request`` ({rc: count}) among the free ones.

    Lowest identifiers first, so a replay of the same operations picks the
    same units.

    :raises InvalidClaimRequest: a count is not a positive integer.
    :raises ComputeResourcesUnavailable: not enough free identifiers.
    :returns: {rc: tuple of identifiers}.
    """
    return pick_from(offered, in_use(held), request, instance_uuid)


def pick_from(offered, used, request, instance_uuid):
    """:func:`pick`, given the identifiers in use ({rc: set}) rather than
    the holdings."""
    chosen, reasons = {}, []
    for rc, count in sorted((request or {}).items()):
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise errors.InvalidClaimRequest(
                reason=f"assigned {rc} count must be a positive integer, got {count!r}"
            )
        free = sorted(set(offered.get(rc, ())) - used.get(rc, set()))
        if len(free) < count:
            reasons.append(f"{rc}: requested {count} assigned unit(s), {len(free)} free")
        else:
            chosen[rc] = tuple(free[:count])
    if reasons:
        raise errors.ComputeResourcesUnavailable(instance_uuid, reasons)
    return chosen


def missing(offered, held):
    """Resource class -> identifiers held by claims but no longer offered.

    Found at start-up or after the host changed (a device removed): the
    operator must look; nothing is released automatically.
    """
    result = {}
    for rc, ids in in_use(held).items():
        gone = sorted(ids - set(offered.get(rc, ())))
        if gone:
            result[rc] = tuple(gone)
    return result
