"""Dedicated CPUs that domains on the host are pinned to while no claim of
theirs keeps them.

A claim chooses its own pinning, but a domain that was running before its
claim (a guest nova pinned, on a host moved to the agent), or one with no
claim at all, keeps the CPUs its ``<cputune>`` names. Handing those CPUs to
another guest would put two guests on one core, so:

- CPUs a domain is pinned to that no claim of its own keeps are never
  pinned by another claim, and are reported (drift);
- an instance claimed while its domain already runs pinned must keep
  exactly the dedicated CPUs its domain is pinned to (or be refused), so
  the claim says what the guest really uses.

Pure: the host's domains and the node's claims in, CPU sets out.
"""

import dataclasses


def pinned_dedicated(domains, cells):
    """{domain uuid: the dedicated CPUs it is pinned to} for every domain
    pinned to at least one (O(domains); run when the domains change).

    A CPU that is shared too (nova's upgrade fallback: pinned guests pin
    the shared CPUs) proves nothing: floating guests are pinned to it."""
    dedicated = frozenset().union(*(c.pcpuset - c.cpuset for c in cells)) if cells else frozenset()
    if not dedicated:
        return {}
    found = {}
    for dom in domains:
        if dom.pinned_cpus:
            cpus = dom.pinned_cpus & dedicated
            if cpus:
                found[dom.uuid] = cpus
    return found


def unclaimed(pinned, kept):
    """{domain uuid: sorted CPUs it is pinned to that its claims do not
    keep}, without the domains whose claims keep all of theirs.

    :param pinned: :func:`pinned_dedicated`'s answer.
    :param kept: callable(uuid) -> the CPUs the claims of that instance
        keep on this node (empty without a claim).
    """
    found = {}
    for uuid, cpus in sorted(pinned.items()):
        rest = cpus - kept(uuid)
        if rest:
            found[uuid] = tuple(sorted(rest))
    return found


def for_claim(cells, unclaimed_pins, consumer, own=None):
    """The cells a claim of ``consumer`` may pin on.

    :param cells: the node's cells with the usage of every claim.
    :param unclaimed_pins: :func:`unclaimed`'s answer.
    :param consumer: the claiming instance: its own domain's CPUs are not
        held against it.
    :param own: the dedicated CPUs its running domain is pinned to, or
        None: with them, those are the only dedicated CPUs it may pin.
    """
    others = frozenset(
        cpu for uuid, cpus in unclaimed_pins.items() if uuid != consumer for cpu in cpus
    )
    if not others and own is None:
        return cells
    result = []
    for cell in cells:
        held = others & cell.pcpuset
        if own is not None:
            held |= cell.pcpuset - own
        result.append(dataclasses.replace(cell, pinned=cell.pinned | held) if held else cell)
    return tuple(result)
