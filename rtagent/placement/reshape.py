"""Reshapes: inventory that moves between providers of the tree while
allocations exist on it (e.g. VCPU from the root to NUMA-cell children).

Writing the inventories one provider at a time cannot work: Placement
refuses to remove an inventory in use. ``POST /reshaper`` replaces the
involved providers' inventories and the affected consumers' allocations in
one transaction, checked against every provider and consumer generation.

The rule here is deliberately simple: a resource class that leaves provider
A and appears on exactly one provider B of the desired tree that did not
have it moves from A to B, allocation by allocation, amount unchanged. Any
other layout change with allocations on it is refused with
:class:`~rtagent.placement.errors.ReshapeUnsupported`.
"""

import dataclasses

from rtagent.placement import diff as diffmod
from rtagent.placement import errors
from rtagent.placement.allocations import DEFAULT_CONSUMER_TYPE


@dataclasses.dataclass(frozen=True)
class Move:
    resource_class: str
    source: str
    dest: str


def moves(desired, view, ops):
    """The class moves that ``ops`` imply (pure).

    :raises ReshapeUnsupported: a class leaves a provider and several
        providers gain it.
    """
    new_invs = {op.uuid: op.inventories for op in ops if isinstance(op, diffmod.SetInventories)}
    gained = {}
    for uuid, invs in new_invs.items():
        before = view.get(uuid)
        had = set(before.inventories) if before else set()
        for rc in set(invs) - had:
            gained.setdefault(rc, []).append(uuid)
    found = []
    for uuid, invs in new_invs.items():
        before = view.get(uuid)
        if before is None:
            continue
        for rc in sorted(set(before.inventories) - set(invs)):
            dests = [d for d in gained.get(rc, ()) if d != uuid and d in desired]
            if len(dests) > 1:
                raise errors.ReshapeUnsupported(
                    resource_class=rc, uuid=uuid, destinations=len(dests)
                )
            if dests:
                found.append(Move(rc, uuid, dests[0]))
    return found


def moved_allocations(client, found):
    """The new allocations of every consumer that ``found`` affects.

    One GET per source provider and one per affected consumer.

    :returns: {consumer: PUT /allocations body with the moves applied}.
    """
    by_source = {}
    for move in found:
        by_source.setdefault(move.source, []).append(move)
    consumers = set()
    for source, source_moves in by_source.items():
        _, allocs = client.get_provider_allocations(source)
        classes = {m.resource_class for m in source_moves}
        consumers |= {c for c, res in allocs.items() if classes & set(res)}
    bodies = {}
    for consumer in sorted(consumers):
        current = client.get_allocations(consumer)
        allocs = {rp: dict(a["resources"]) for rp, a in current["allocations"].items()}
        for move in found:
            amount = allocs.get(move.source, {}).pop(move.resource_class, 0)
            if amount:
                dest = allocs.setdefault(move.dest, {})
                dest[move.resource_class] = dest.get(move.resource_class, 0) + amount
        bodies[consumer] = {
            "allocations": {rp: {"resources": res} for rp, res in allocs.items() if res},
            "project_id": current["project_id"],
            "user_id": current["user_id"],
            "consumer_generation": current["consumer_generation"],
            "consumer_type": current.get("consumer_type") or DEFAULT_CONSUMER_TYPE,
        }
    return bodies


def involved(found):
    return {m.source for m in found} | {m.dest for m in found}
