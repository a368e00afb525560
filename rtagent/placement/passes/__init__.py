"""The allocation passes: what a node's sync does once its provider tree
is right in Placement.

The tree sync (:mod:`rtagent.placement.sync`) makes Placement hold the
node's providers, inventories and traits. Allocations are the scheduler's
and nova's to write; the agent writes only where it can prove Placement
wrong about a consumer of its own node. Each such correction is a pass:

=====================  ===================================================
:mod:`.heal`           released consumers' allocations removed from our
                       providers (aborted, deleted, moved away)
:mod:`.unknown`        allocations of consumers the node does not know,
                       reported and never touched
:mod:`.pinned_vcpus`   pinned vCPUs a legacy scheduler allocated as VCPU,
                       moved to PCPU
:mod:`.pci_devices`    PCI devices a claim holds that its allocation does
                       not count (left out, attached, detached)
:mod:`.pool_usage`     other hosts' DISK_GB on a shared disk pool, counted
                       by this node's claims as Placement counts it
:mod:`.pool_return`    this node's guests' DISK_GB moved from a shared pool's
                       provider back to the root (nova's layout again)
=====================  ===================================================

Every pass has the same shape, :class:`AllocationPass`: ``run(node)`` with a :class:`SyncedNode`,
returning the node for the passes after it (what a pass learnt that the
later ones may use, such as the consumers healing emptied, rides on it:
:meth:`SyncedNode.after`), and ``status(known)``, the figures it adds to
the node's sync status. A
pass keeps what it learnt between runs (what it checked, at which
generation) so that a steady node costs it nothing; it reads the tracker's
published snapshot and calls the tracker only for short writes. A pass
that meets an unreachable Placement raises, and the node's sync backs off
as for a failed tree sync. Passes run in the audit thread or the prompt
sync's, one node at a time, never under a tracker lock.

A new correction is a new module here and one entry in :func:`standard`.
"""

import dataclasses
import typing

from rtagent.placement.passes.heal import HealPass
from rtagent.placement.passes.pci_devices import PciDevicePass
from rtagent.placement.passes.pinned_vcpus import PinnedVcpuPass
from rtagent.placement.passes.pool_return import PoolReturnPass
from rtagent.placement.passes.pool_usage import PoolUsagePass
from rtagent.placement.passes.unknown import UnknownConsumerPass


@dataclasses.dataclass(frozen=True)
class SyncedNode:
    """A node just after its tree sync: what every pass is given.

    :param node_uuid: the node (its root provider's UUID).
    :param tracker: the node's tracker: ``snapshot()`` to read (again, at
        the moment a write is decided), and the short writes a pass owns
        (``forget_released``).
    :param view: Placement's providers as the sync left them
        (a :class:`~rtagent.placement.tree.ProviderTree`, generations
        included).
    :param tree: the provider tree synced.
    :param held: {consumer: {provider: {class: amount}}}: the PCI devices
        the node's claims hold on its device providers (empty without PCI
        in Placement).
    :param emptied: consumers an earlier pass of this run proved hold
        nothing on the node's providers any more (healed).
    :param audit: True at the periodic audit, False at a prompt sync
        (only audits confirm an unknown consumer).
    """

    node_uuid: str
    tracker: object
    view: object
    tree: object
    held: dict = dataclasses.field(default_factory=dict)
    emptied: frozenset = frozenset()
    audit: bool = True

    def after(self, *, emptied=frozenset()):
        """This node as the next pass sees it."""
        if not emptied:
            return self
        return dataclasses.replace(self, emptied=self.emptied | frozenset(emptied))

    @property
    def root(self):
        """The node's root provider as Placement holds it (None before the
        first sync created it)."""
        return self.view.get(self.node_uuid)


class AllocationPass(typing.Protocol):
    """What every pass is (the module's docstring says how they run)."""

    name: str  # its key in the node's status and logs

    def run(self, node: SyncedNode) -> SyncedNode:
        """Correct what this pass owns on ``node``; :returns: the node
        for the passes after it (:meth:`SyncedNode.after`)."""

    def status(self, known: frozenset) -> dict:
        """The figures it adds to the node's sync status; ``known``: the
        node's current known consumers."""


@dataclasses.dataclass(frozen=True)
class Passes:
    """A node's passes, in the order they run, and the one operators ask
    for by name (``rtagent status``'s unknown consumers, ``report_unknown``)."""

    order: tuple = ()
    unknown: UnknownConsumerPass | None = None

    def __iter__(self):
        return iter(self.order)


def standard(client, *, heal_budget=None, checked=None, unknown_after=0.0, clock=None):
    """The passes of every node, in the order they run: healing first, so
    that what it removes is not reported as unknown in the same run.

    :param heal_budget: a :class:`~.heal.HealBudget`.
    :param checked: a :class:`~rtagent.placement.checkpoint.MetaRecord`
        for :class:`~.unknown.UnknownConsumerPass` (or None).
    :param unknown_after: seconds between the two audits that must find
        a consumer before it is reported unknown (the refresh interval).
    :param clock: monotonic seconds (default ``time.monotonic``).
    :returns: :class:`Passes`.
    """
    unknown = UnknownConsumerPass(client, checked, confirm_after=unknown_after, clock=clock)
    order: tuple[AllocationPass, ...] = (
        HealPass(client, heal_budget),
        unknown,
        PinnedVcpuPass(client),
        PciDevicePass(client),
        PoolUsagePass(client),
        PoolReturnPass(client),
    )
    return Passes(order, unknown)


__all__ = [
    "AllocationPass",
    "HealPass",
    "Passes",
    "PciDevicePass",
    "PinnedVcpuPass",
    "PoolReturnPass",
    "PoolUsagePass",
    "SyncedNode",
    "UnknownConsumerPass",
    "standard",
]
