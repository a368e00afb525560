"""Untracked domains' usage as a reservation, the same for the agent and
Placement.

Running domains that no claim accounts for (drift) use the host. Counted
only by the agent, they make the scheduler pick a node that then refuses
the build: Placement sees it empty. Published as part of each inventory's
``reserved`` instead, Placement and the agent check capacity with one
formula over the same numbers::

    (total - reserved - untracked_reserved) * ratio - claimed >= requested

``reserved`` is in physical units, and Placement applies the allocation
ratio after subtracting it, so untracked usage ``u`` of a class with ratio
``r`` is reserved as ``ceil(u / r)`` units: 6 untracked vCPUs at ratio 4.0
hold back 2 physical CPUs (8 vCPUs of capacity). Rounding up is the safe
side: the scheduler may skip a node with up to ``r - 1`` vCPUs to spare,
but never sends it a build it refuses. The agent's own check uses this
same reservation (not the raw usage), so the two never disagree.

Pure functions over values; no locks, no I/O.
"""

import dataclasses
import math


def reservation(inventories, usage):
    """Resource class -> whole units to reserve for ``usage``.

    :param inventories: resource class -> Inventory with its ratio resolved
        (the one claims are checked with, which is Placement's).
    :param usage: resource class -> amount the untracked domains use, in
        the units claims use (vCPUs, MiB, GiB).
    """
    result = {}
    for rc, inv in inventories.items():
        amount = usage.get(rc, 0)
        ratio = inv.allocation_ratio or 1.0
        if amount <= 0 or ratio <= 0:
            continue
        units = math.ceil(amount / ratio)
        # A float quotient such as 11 / 1.1 = 10.000000000000002 must not
        # cost a whole extra unit.
        if units > 0 and (units - 1) * ratio >= amount:
            units -= 1
        result[rc] = units
    return result


def add_reserved(inventories, units):
    """``inventories`` with ``units`` (resource class -> amount) added to
    their ``reserved``, clamped to the total: Placement refuses a
    reservation above the total, and capacity 0 already refuses everything."""
    result = dict(inventories)
    for rc, extra in units.items():
        inv = result.get(rc)
        if inv is None or extra <= 0:
            continue
        result[rc] = dataclasses.replace(inv, reserved=min(inv.reserved + extra, inv.total))
    return result


def checked(inventories, usage, reserve):
    """What claims are checked against while untracked domains use
    ``usage`` (resource class -> amount, zero when they are not counted).

    :param reserve: the policy's ``reserve_untracked``.
    :returns: ``(inventories, counted)``: with ``reserve``, the inventories
        with the usage reserved (:func:`reservation`, as Placement is sent
        it) and ``counted`` False; else ``inventories`` as they are, the
        usage counted as used besides the claims (``counted`` True).
    """
    if reserve:
        return add_reserved(inventories, reservation(inventories, usage)), False
    return dict(inventories), True
