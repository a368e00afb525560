"""Pinned guests whose allocation still says VCPU: nova's legacy pinning,
moved to PCPU.

Before ``[compute] cpu_dedicated_set`` existed, nova pinned guests on the
shared CPUs (``vcpu_pin_set``, or every CPU) and its scheduler allocated
their vCPUs as VCPU; nova 34 still does, as its upgrade fallback, and so
does the agent on such a host (docs/numa.md). Once the node has
``cpu_dedicated_set``, a pinned guest's claim counts its vCPUs as PCPU.

Two ways bring such a guest's allocation to PCPU:

- When the node's PCPU inventory appears (the operator set
  ``cpu_dedicated_set`` on a host of the fallback), the sync adds it in one
  ``POST /reshaper`` with every pinned consumer's VCPU moved to PCPU: the
  node's claims hold them (:func:`holdings`, the sync's ``held``) and
  :func:`rtagent.placement.reshape.with_seeded` swaps the classes. nova's
  libvirt driver does the same at its start (``ReshapeNeeded``).
- When the inventory is in Placement already and a guest's claim arrives
  later (a host moved to the agent from nova: its guests are claimed by
  the reconciliation, after the first sync), :class:`PinnedAllocations`
  finds the consumers whose allocation on the root holds their pinned
  vCPUs as VCPU and moves them all in one ``POST /reshaper`` (the root's
  inventories as read just before, unchanged): every consumer moves, or
  none does, and each write is checked against the consumer generation
  read, so a concurrent writer makes it a conflict, not a lost update.
"""

import dataclasses
import logging

from rtagent.placement import errors
from rtagent.placement.consumers import consumer_type
from rtagent.resources import PCPU

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Correction:
    """Move ``amount`` of ``consumer``'s VCPU on the root to PCPU."""

    consumer: str
    amount: int


def claimed_pinned(node, instances, migrations):
    """{consumer: the resources its claim holds on the node's root} for
    every consumer of the node that holds PCPU (pure): each instance living
    here under its own UUID; a move's source side under the migration's
    UUID (nova's migration consumer holds it); an incoming move's instance
    that has not landed yet under its own.

    :param node: the node's UUID (its root provider's).
    :param instances, migrations: the node's tracked
        :class:`~rtagent.tracker.model.Instance` and
        :class:`~rtagent.tracker.model.Migration` values.
    """
    found = {i.uuid: dict(i.resources) for i in instances if i.resources.get(PCPU)}
    for move in migrations:
        if move.source_node == node and move.old_resources.get(PCPU):
            found[move.uuid] = dict(move.old_resources)
        if move.dest_node == node and move.instance_uuid not in found:
            if move.new_resources.get(PCPU):
                found[move.instance_uuid] = dict(move.new_resources)
    return found


def holdings(snapshot):
    """{consumer: {root: {"PCPU": amount}}}: the PCPU the node's claims
    hold (see :func:`claimed_pinned`), in the form of a sync's ``held``."""
    root = snapshot.node_uuid
    found = claimed_pinned(root, snapshot.instances, snapshot.migrations)
    return {c: {root: {PCPU: r[PCPU]}} for c, r in found.items()}


def correction(claimed, held):
    """What to move for one consumer (pure).

    :param claimed: the claim's resources ({class: amount}).
    :param held: its allocation on the root provider in Placement.
    :returns: ``(amount, None)`` to move, ``(0, None)`` when the
        allocation is right (or absent), ``(0, reason)`` when it differs
        from the claim in a way that is not the legacy pattern (left alone).
    """
    pinned = claimed.get("PCPU", 0)
    if not held or held.get("PCPU", 0) >= pinned:
        return 0, None
    need = pinned - held.get("PCPU", 0)
    # The legacy pattern exactly: the vCPUs in all are the claim's, only the
    # class of the pinned ones differs. Anything else is someone's decision
    # we cannot read, so it is reported, not rewritten.
    if held.get("VCPU", 0) - need != claimed.get("VCPU", 0):
        return 0, (
            f"Placement holds VCPU {held.get('VCPU', 0)}, PCPU {held.get('PCPU', 0)}; "
            f"the claim counts VCPU {claimed.get('VCPU', 0)}, PCPU {pinned}"
        )
    return need, None


def moved(current, root, amount):
    """``current`` ({provider: {class: amount}}) with ``amount`` of the
    root's VCPU counted as PCPU (pure)."""
    result = {rp: dict(res) for rp, res in current.items()}
    on_root = result[root]
    on_root["VCPU"] -= amount
    if not on_root["VCPU"]:
        del on_root["VCPU"]
    on_root["PCPU"] = on_root.get("PCPU", 0) + amount
    return result


class PinnedAllocations:
    """Checks each pinned consumer of one node once, and moves what the
    legacy pattern left as VCPU to PCPU, all in one ``POST /reshaper``.

    Costs nothing while no new pinned consumer arrives. A new one costs one
    ``GET /allocations/{consumer}``; more than ``max_consumer_reads`` at
    once (every pinned guest after a restart) cost one read of the root's
    allocations instead. Only when some need a move: a read of the root's
    inventories and one reshape.

    Not thread-safe: the audit thread only.
    """

    def __init__(self, client, max_consumer_reads=8):
        self._client = client
        self._max_reads = max_consumer_reads
        self._checked = {}  # consumer -> the pinned count it was checked for
        # The (instances, migrations) tuples of the last pass that left
        # nothing to do: the tracker hands out the same tuples while its
        # state is unchanged, so a steady tick costs two identity tests, not
        # a scan of every instance.
        self._settled = None

    def check(self, root, instances, migrations=()):
        """Look at the pinned consumers not checked yet.

        :param root: the node's root provider UUID.
        :param instances: the node's tracked instances
            (:class:`~rtagent.tracker.model.Instance`).
        :param migrations: the node's moves
            (:class:`~rtagent.tracker.model.Migration`).
        :returns: the :class:`Correction` values written.
        :raises PlacementUnavailable: stop; the next pass looks again.
        """
        settled = self._settled
        if settled is not None and instances is settled[0] and migrations is settled[1]:
            return ()
        pinned = claimed_pinned(root, instances, migrations)
        self._checked = {c: n for c, n in self._checked.items() if c in pinned}
        new = sorted(c for c, r in pinned.items() if self._checked.get(c) != r[PCPU])
        if not new:
            self._settled = (instances, migrations)
            return ()
        bodies = {}  # consumer -> its GET /allocations body, when read
        if len(new) > self._max_reads:
            _, held = self._client.get_provider_allocations(root)
        else:
            held = {}
            for consumer in new:
                bodies[consumer] = self._client.get_allocations(consumer)
                allocs = bodies[consumer].get("allocations") or {}
                if root in allocs:
                    held[consumer] = allocs[root]["resources"]
        moves, checked = {}, {}
        for consumer in new:
            claimed = pinned[consumer]
            amount, differs = correction(claimed, held.get(consumer))
            if differs:
                LOG.warning(
                    "Pinned instance %s: its allocation on provider %s differs from its "
                    "claim and is left alone: %s",
                    consumer,
                    root,
                    differs,
                )
            if amount:
                moves[consumer] = amount
            else:
                checked[consumer] = claimed[PCPU]
        done = self._move(root, pinned, moves, bodies) if moves else ()
        for fixed in done:
            checked[fixed.consumer] = pinned[fixed.consumer][PCPU]
        self._checked.update(checked)
        return done

    def _move(self, root, pinned, moves, bodies):
        """Move ``moves`` ({consumer: VCPU to count as PCPU}) in one
        reshape, on each consumer's allocations as read (read now when only
        the provider's bulk read saw them). :returns: the corrections
        written (none on a conflict: looked at again next pass)."""
        allocations = {}
        for consumer, amount in sorted(moves.items()):
            body = bodies.get(consumer) or self._client.get_allocations(consumer)
            current = {
                rp: dict(a["resources"]) for rp, a in (body.get("allocations") or {}).items()
            }
            # Re-checked on the body the write is based on: it may have
            # changed since the bulk read.
            if correction(pinned[consumer], current.get(root)) != (amount, None):
                continue
            allocations[consumer] = {
                "allocations": {
                    rp: {"resources": res} for rp, res in moved(current, root, amount).items()
                },
                "project_id": body["project_id"],
                "user_id": body["user_id"],
                "consumer_generation": body["consumer_generation"],
                "consumer_type": consumer_type(body),
            }
        if not allocations:
            return ()
        generation, inventories = self._client.get_inventories(root)
        payload = {root: {"resource_provider_generation": generation, "inventories": inventories}}
        try:
            self._client.reshape(payload, allocations)
        except errors.GenerationConflict:
            LOG.info(
                "Provider %s or a pinned consumer changed while VCPU was moved to PCPU; next pass",
                root,
            )
            return ()
        LOG.warning(
            "Pinned consumer(s) %s held their pinned vCPUs as VCPU on provider %s (nova's "
            "legacy pinning on shared CPUs): moved to PCPU in one reshape",
            ", ".join(f"{c} ({moves[c]})" for c in sorted(allocations)),
            root,
        )
        return tuple(Correction(c, moves[c]) for c in sorted(allocations))


class PinnedVcpuPass:
    """The pinned-vCPU move of one node (see :mod:`rtagent.placement.passes`)."""

    name = "pinned_vcpus"

    def __init__(self, client):
        self._pinned = PinnedAllocations(client)

    def run(self, node):
        if node.root is not None:
            snapshot = node.tracker.snapshot()
            self._pinned.check(node.node_uuid, snapshot.instances, snapshot.migrations)
        return node

    def status(self, known):
        return {}
