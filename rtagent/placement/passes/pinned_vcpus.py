"""Pinned guests whose allocation still says VCPU: nova's legacy pinning,
moved to PCPU.

Before ``[compute] cpu_dedicated_set`` existed, nova pinned guests on the
CPUs of ``vcpu_pin_set`` and its scheduler allocated their vCPUs as VCPU.
The agent pins only on the dedicated set, and a claim of a pinned guest
counts its vCPUs as PCPU; but when an operator moves such a host to the
agent and claims its existing guests (their allocations already exist and
are not rewritten by the claim), Placement keeps the old VCPU allocation.
Placement then offers those dedicated CPUs to the scheduler a second time
(PCPU looks free) and counts the guests against the much smaller VCPU
inventory of the shared set.

:class:`PinnedAllocations` finds such consumers and moves their pinned
vCPUs from VCPU to PCPU on the node's root provider, one consumer at a time
(``PUT /allocations/{consumer}`` with the generation read, so a concurrent
writer makes it a conflict, not a lost update). This is the allocation half
of nova's VCPU-to-PCPU reshape: nova does it with ``POST /reshaper`` because
its PCPU inventory appears in the same request; here the inventory is
already in Placement when a guest's claim arrives (the first sync after
start-up publishes it), so each consumer is an independent, atomic write.
"""

import dataclasses
import logging

from rtagent.placement import errors
from rtagent.placement.consumers import rewrite

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Correction:
    """Move ``amount`` of ``consumer``'s VCPU on the root to PCPU."""

    consumer: str
    amount: int


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
    """Checks each pinned instance of one node once, and moves what the
    legacy pattern left as VCPU to PCPU.

    Costs nothing while no new pinned instance arrives. A new one costs one
    ``GET /allocations/{consumer}``; more than ``max_consumer_reads`` at
    once (every pinned guest after a restart) cost one read of the root's
    allocations instead. Only consumers that need a move are written.

    Not thread-safe: the audit thread only.
    """

    def __init__(self, client, max_consumer_reads=8):
        self._client = client
        self._max_reads = max_consumer_reads
        self._checked = {}  # consumer -> the pinned count it was checked for
        # The instances tuple of the last pass that left nothing to do: the
        # tracker hands out the same tuple while its state is unchanged, so
        # a steady tick costs one identity test, not a scan of every instance.
        self._settled = None

    def check(self, root, instances):
        """Look at the pinned ``instances`` not checked yet.

        :param root: the node's root provider UUID.
        :param instances: the node's tracked instances
            (:class:`~rtagent.tracker.model.Instance`).
        :returns: the :class:`Correction` values written.
        :raises PlacementUnavailable: stop; the next pass looks again.
        """
        if instances is self._settled:
            return ()
        pinned = {i.uuid: i for i in instances if i.resources.get("PCPU", 0)}
        self._checked = {c: n for c, n in self._checked.items() if c in pinned}
        new = sorted(c for c, i in pinned.items() if self._checked.get(c) != i.resources["PCPU"])
        if not new:
            self._settled = instances
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
        done = []
        for consumer in new:
            claimed = pinned[consumer].resources
            amount, differs = correction(claimed, held.get(consumer))
            if differs:
                LOG.warning(
                    "Pinned instance %s: its allocation on provider %s differs from its "
                    "claim and is left alone: %s",
                    consumer,
                    root,
                    differs,
                )
            if amount and not self._move(consumer, root, claimed, amount, bodies.get(consumer)):
                continue  # conflict: looked at again next pass
            if amount:
                done.append(Correction(consumer, amount))
            self._checked[consumer] = claimed["PCPU"]
        return tuple(done)

    def _move(self, consumer, root, claimed, amount, body=None):
        """Write the move on ``body`` (the consumer's allocations as read),
        reading it first when only the provider's bulk read saw it."""
        if body is None:
            body = self._client.get_allocations(consumer)
        current = {rp: dict(a["resources"]) for rp, a in (body.get("allocations") or {}).items()}
        # Re-checked on the body the write is based on: it may have changed
        # since the bulk read.
        if correction(claimed, current.get(root)) != (amount, None):
            return False
        try:
            rewrite(self._client, consumer, moved(current, root, amount), body)
        except errors.GenerationConflict:
            LOG.info("Consumer %s changed while its VCPU was moved to PCPU; next pass", consumer)
            return False
        LOG.warning(
            "Pinned instance %s held its %d pinned vCPU(s) as VCPU on provider %s "
            "(nova's legacy vcpu_pin_set pinning): moved to PCPU",
            consumer,
            amount,
            root,
        )
        return True


class PinnedVcpuPass:
    """The pinned-vCPU move of one node (see :mod:`rtagent.placement.passes`)."""

    name = "pinned_vcpus"

    def __init__(self, client):
        self._pinned = PinnedAllocations(client)

    def run(self, node):
        if node.root is not None:
            self._pinned.check(node.node_uuid, node.tracker.snapshot().instances)
        return node

    def status(self, known):
        return {}
