"""Reshapes: inventory that moves between providers of the tree while
allocations exist on it (e.g. VCPU from the root to NUMA-cell children).

Writing the inventories one provider at a time cannot work: Placement
refuses to remove an inventory in use. ``POST /reshaper`` replaces the
involved providers' inventories and the affected consumers' allocations in
one transaction, checked against every provider and consumer generation.

The rule here is deliberately simple: a resource class that leaves provider
A and appears on exactly one provider B of the desired tree that did not
have it moves from A to B, allocation by allocation, amount unchanged.
When no provider gains it, a sharing provider of the desired tree that
already has it is B (a host joining a shared disk pool that another host
published first: ``docs/rbd.md``). Any
other layout change with allocations on it is refused with
:class:`~rtagent.placement.errors.ReshapeUnsupported`.

Two more cases add or remove allocations rather than move them, for
resources that were not in Placement before, or leave it (PCI devices as
``[pci] report_in_placement`` is turned on or off): a class that appears on
a provider is *seeded* with what the node's claims already hold of it
(:func:`seeded`), and a provider being retired is *emptied* (:func:`emptied`).

nova's VCPU-to-PCPU reshape is a seed: when ``cpu_dedicated_set`` is set on
a host of nova's upgrade fallback, PCPU appears on the root and the pinned
guests' claims hold it (:func:`rtagent.placement.passes.pinned_vcpus.holdings`);
each seeded PCPU replaces as much of the consumer's VCPU there, in the same
``POST /reshaper`` that adds the PCPU inventory (and drops VCPU's, when no
CPU is shared any more), so no crash can leave one without the other.
"""

import dataclasses
import logging

from rtagent.placement import diff as diffmod
from rtagent.placement import errors
from rtagent.placement.consumers import consumer_type
from rtagent.resources import PCPU, VCPU

LOG = logging.getLogger(__name__)


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
            if not dests:
                dests = _sharing_holders(desired, view, rc, uuid)
            if len(dests) > 1:
                raise errors.ReshapeUnsupported(
                    resource_class=rc, uuid=uuid, destinations=len(dests)
                )
            if dests:
                found.append(Move(rc, uuid, dests[0]))
    return found


def _holders(client, found):
    """The consumers that hold a class of ``found`` on its source."""
    by_source = {}
    for move in found:
        by_source.setdefault(move.source, []).append(move)
    consumers = set()
    for source, source_moves in by_source.items():
        _, allocs = client.get_provider_allocations(source)
        classes = {m.resource_class for m in source_moves}
        consumers |= {c for c, res in allocs.items() if classes & set(res)}
    return consumers


def _sharing_holders(desired, view, rc, source):
    """The sharing providers of ``desired`` that already hold ``rc`` in
    Placement: a host that joins a shared disk pool another host created
    moves its guests' DISK_GB there, though the pool gains no class."""
    found = []
    for provider in desired:
        if not provider.sharing or provider.uuid == source or rc not in provider.inventories:
            continue
        seen = view.get(provider.uuid)
        if seen is not None and rc in seen.inventories:
            found.append(provider.uuid)
    return found


def moved_allocations(client, found, consumers=None):
    """The new allocations of every consumer that ``found`` affects.

    One GET per source provider and one per affected consumer.

    :param consumers: the consumers to move, when the caller knows them
        (then the source providers are not read); None: every consumer
        that holds a moved class on a source.
    :returns: {consumer: PUT /allocations body with the moves applied}.
    """
    if consumers is None:
        consumers = _holders(client, found)
    bodies = {}
    for consumer in sorted(consumers):
        current = client.get_allocations(consumer)
        if not _known(current):
            continue  # its allocations went since the provider's were read
        body = _body(current)
        allocs = {rp: a["resources"] for rp, a in body["allocations"].items()}
        for move in found:
            amount = allocs.get(move.source, {}).pop(move.resource_class, 0)
            if amount:
                dest = allocs.setdefault(move.dest, {})
                dest[move.resource_class] = dest.get(move.resource_class, 0) + amount
        bodies[consumer] = dict(
            body, allocations={rp: {"resources": res} for rp, res in allocs.items() if res}
        )
    return bodies


def involved(found):
    return {m.source for m in found} | {m.dest for m in found}


def seeded(view, ops, held):
    """The part of ``held`` on classes that ``ops`` add to a provider (pure).

    :param held: {consumer: {provider: {class: amount}}}, what the node's
        claims hold by its own accounting.
    :returns: {consumer: {provider: {class: amount}}}.
    """
    gained = set()
    for op in ops:
        if isinstance(op, diffmod.SetInventories):
            before = view.get(op.uuid)
            had = set(before.inventories) if before else set()
            gained |= {(op.uuid, rc) for rc in set(op.inventories) - had}
    found = {}
    for consumer, allocs in (held or {}).items():
        for rp, classes in allocs.items():
            for rc, amount in classes.items():
                if amount and (rp, rc) in gained:
                    found.setdefault(consumer, {}).setdefault(rp, {})[rc] = amount
    return found


def with_seeded(client, bodies, seeds, root):
    """``bodies`` (from :func:`moved_allocations`) with ``seeds`` (from
    :func:`seeded`) added; one GET per consumer not already in ``bodies``.

    A consumer that holds nothing on ``root`` in Placement is left alone:
    its allocations on this node are not (or no longer) there, e.g. the
    instance of a move in flight whose source side a migration holds. So is
    one that holds nothing at all (a claim Placement never had, or whose
    allocations went with a provider deleted outside): Placement answers
    it with no owner to write the allocation under, and the node's
    healing, not a seed, is what writes or reports it.
    """
    bodies = dict(bodies)
    for consumer in sorted(seeds):
        body = bodies.get(consumer)
        if body is None:
            current = client.get_allocations(consumer)
            if not _known(current):
                LOG.warning(
                    "Consumer %s holds nothing in Placement (no allocation there): "
                    "its allocations %s on this node are not added",
                    consumer,
                    seeds[consumer],
                )
                continue
            body = _body(current)
        allocs = {rp: dict(a["resources"]) for rp, a in body["allocations"].items()}
        if root not in allocs:
            LOG.warning(
                "Consumer %s holds nothing on provider %s: its allocations %s are not added",
                consumer,
                root,
                seeds[consumer],
            )
            continue
        for rp, classes in seeds[consumer].items():
            allocs[rp] = {**allocs.get(rp, {}), **classes}
            if rp == root and classes.get(PCPU):
                _pinned_vcpus_moved(allocs[rp], classes[PCPU])
        bodies[consumer] = dict(
            body, allocations={rp: {"resources": r} for rp, r in allocs.items()}
        )
    return bodies


def _pinned_vcpus_moved(resources, pcpus):
    """``resources`` (a consumer's on the root, PCPU seeded) without the
    VCPU its seeded PCPU replaces: nova's VCPU-to-PCPU reshape. A pinned
    guest of nova's upgrade fallback holds its pinned vCPUs as VCPU; once
    the node offers PCPU they are its PCPU instead, not both (a ``mixed``
    guest keeps its shared vCPUs as VCPU)."""
    left = resources.get(VCPU, 0) - pcpus
    if left > 0:
        resources[VCPU] = left
    else:
        resources.pop(VCPU, None)


def emptied(client, providers):
    """The new allocations of every consumer holding anything on
    ``providers``, without it. One GET per provider and per consumer.

    :returns: {consumer: PUT /allocations body}.
    """
    providers = frozenset(providers)
    consumers = set()
    for rp in sorted(providers):
        _, allocs = client.get_provider_allocations(rp)
        consumers |= set(allocs)
    bodies = {}
    for consumer in sorted(consumers):
        current = client.get_allocations(consumer)
        if not _known(current):
            continue  # nothing left to take off
        body = _body(current)
        kept = {rp: a for rp, a in body["allocations"].items() if rp not in providers}
        bodies[consumer] = dict(body, allocations=kept)
    return bodies


def driver_bodies(allocations):
    """``POST /reshaper`` allocation bodies of the allocations a virt driver
    returned from a reshape (nova's ``update_provider_tree`` with
    ``allocations``): each consumer's as the driver left it, with the
    generation, project, user and type read before it was handed over."""
    return {consumer: _body(body) for consumer, body in sorted(allocations.items())}


def _known(current):
    """Whether a ``GET /allocations/{c}`` answer is of a consumer with
    allocations: Placement answers one it does not know (or whose
    allocations all went) with ``{"allocations": {}}`` and no project,
    user or generation."""
    return bool(current.get("allocations"))


def _body(current):
    """A ``POST /reshaper`` allocation body of ``current`` (a
    ``GET /allocations/{c}`` answer), unchanged."""
    return {
        "allocations": {
            rp: {"resources": dict(a["resources"])}
            for rp, a in (current.get("allocations") or {}).items()
            # A driver may leave a provider with nothing (Placement never
            # answers one): nothing to write there.
            if a.get("resources")
        },
        "project_id": current["project_id"],
        "user_id": current["user_id"],
        "consumer_generation": current["consumer_generation"],
        "consumer_type": consumer_type(current),
    }
