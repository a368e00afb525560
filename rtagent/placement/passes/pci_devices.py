"""Device allocations a scheduler did not write: healed onto the PCI
providers.

With ``[pci] report_in_placement`` on, a claim that takes devices must
hold them in Placement too, on the providers that count them. A scheduler
that allocates them (nova's with ``[filter_scheduler] pci_in_placement``,
or the agent's own standalone claims) writes that; nova's scheduler
without the prefilter, used while a cloud is upgraded, allocates only the
flavor on the root. Placement then shows the devices free while guests use
them, and a prefilter turned on later would hand them out a second time.

:class:`DeviceAllocations` finds such consumers and sets the amount of
each device provider's class in their allocation to what the node's claims
hold there (``PUT /allocations/{consumer}`` with the generation read: a
concurrent writer makes it a conflict, looked at again on the next pass,
never a lost update). nova's resource tracker heals the same way, but
reads every allocation on the node at every periodic audit to find them;
here a consumer is looked at when its devices change, so a steady node
costs nothing.

Left alone, as nova leaves them (and a standalone claim whose allocation
is still being written):

- an instance resized on this same node: the migration holds the old
  side's allocation and the instance the new one, but the devices of both
  sides belong to the instance; it is looked at again when the move ends
  (a move between two nodes is not in the way: each side's devices are
  added to the allocation that holds that node's root, or to none);
- a consumer that holds nothing on the node's root provider: its
  allocation is elsewhere (or lost, which is for ``nova-manage placement
  heal_allocations``), and adding devices here would count them against a
  guest that is not here.

Amounts on other providers, and other classes, are never changed.
"""

import logging

from rtagent.placement import errors
from rtagent.placement.consumers import rewrite

LOG = logging.getLogger(__name__)


def healed(current, root, wanted):
    """``current`` with the device amounts of ``wanted`` (pure).

    :param current: {provider: {class: amount}}, the consumer's allocation
        as Placement holds it.
    :param root: the node's root provider UUID.
    :param wanted: {provider: {class: amount}}, the devices the node's
        claims hold for the consumer, by provider; an amount of 0 removes
        the class from that provider (a device given back).
    :returns: the new {provider: {class: amount}}, or None when there is
        nothing to write (already right, or nothing held on ``root``).
    """
    if not current.get(root) or not missing(current, wanted):
        return None
    result = {rp: dict(res) for rp, res in current.items()}
    for rp, classes in wanted.items():
        on_rp = result.setdefault(rp, {})
        for rc, amount in classes.items():
            if amount:
                on_rp[rc] = amount
            else:
                on_rp.pop(rc, None)
        if not on_rp:
            del result[rp]
    return result


def missing(current, wanted):
    """Whether ``current`` differs from any amount of ``wanted`` (both
    {provider: {class: amount}}, an absent class counting 0; pure)."""
    return any(
        current.get(rp, {}).get(rc, 0) != amount
        for rp, classes in wanted.items()
        for rc, amount in classes.items()
    )


def with_dropped(wanted, before):
    """``wanted`` with 0 for every class of ``before`` (the devices last
    checked) it no longer has: those devices were given back (pure)."""
    result = {rp: dict(classes) for rp, classes in wanted.items()}
    for rp, classes in before.items():
        for rc in classes:
            result.setdefault(rp, {}).setdefault(rc, 0)
    return result


class DeviceAllocations:
    """Looks at each consumer of the node's devices once per set of devices
    held, and adds to its allocation what the scheduler left out.

    Costs nothing while no claim takes or changes devices. A consumer whose
    devices are new to it costs one ``GET /allocations/{consumer}``; more
    than ``max_consumer_reads`` at once (every consumer after a restart, or
    when reporting is turned on) cost one read of each device provider's
    allocations instead, and a consumer read only when it needs a write.

    Not thread-safe: the audit thread only.
    """

    def __init__(self, client, max_consumer_reads=8):
        self._client = client
        self._max_reads = max_consumer_reads
        # consumer -> the {provider: {class: amount}} it was checked for.
        self._checked = {}
        # The ``held`` of the last pass that left nothing to do: an equal
        # one (a steady tick) costs one comparison, no request.
        self._settled = None

    @property
    def idle(self):
        """Nothing checked: with no device held either, nothing to do."""
        return not self._checked

    def check(self, root, held, busy=frozenset(), moving=None, claimed=None):
        """Look at the consumers of ``held`` not checked for their current
        devices and moves, and at those that gave all theirs back.

        :param root: the node's root provider UUID.
        :param held: {consumer: {provider: {class: amount}}}, the devices
            the node's claims hold on its PCI providers (see
            :class:`~rtagent.placement.pci_providers.Report`).
        :param busy: consumers left alone for now: instances in a move
            whose source and destination are this node, standalone claims
            being written.
        :param moving: {instance: migration} of the moves in flight between
            this node and another: a consumer is looked at again when its
            move starts or ends (its allocation on this node changes hands).
        :param claimed: the instances claimed on the node: one checked with
            devices that holds none now (they were detached) has them taken
            out of its allocation; one no longer claimed is forgotten (what
            it holds is for the healing of released consumers). None: those
            of ``held``.
        :returns: the consumers whose allocation was written, sorted.
        :raises PlacementUnavailable: stop; the next pass looks again.
        """
        moving = moving or {}
        claimed = frozenset(held) if claimed is None else claimed
        state = (held, moving, busy, claimed)
        if state == self._settled:
            return ()
        marks = {c: (w, moving.get(c)) for c, w in held.items() if c not in busy}
        for consumer in [c for c in self._checked if c not in held]:
            if consumer not in claimed:
                del self._checked[consumer]
            elif consumer not in busy:
                marks[consumer] = ({}, moving.get(consumer))
        new = sorted(c for c, m in marks.items() if self._checked.get(c) != m)
        wants = {c: with_dropped(marks[c][0], self._checked.get(c, ({}, None))[0]) for c in new}
        found = self._bulk(wants) if len(new) > self._max_reads else {}
        done = []
        conflicts = False
        for consumer in new:
            wanted = wants[consumer]
            if consumer in found and not missing(found[consumer], wanted):
                self._remember(consumer, marks[consumer])
                continue
            written = self._heal(consumer, root, wanted)
            if written is None:
                conflicts = True  # looked at again on the next pass
                continue
            if written:
                done.append(consumer)
            self._remember(consumer, marks[consumer])
        if not conflicts:
            self._settled = (dict(held), dict(moving), frozenset(busy), claimed)
        return tuple(done)

    def _remember(self, consumer, mark):
        if mark[0]:
            self._checked[consumer] = mark
        else:
            self._checked.pop(consumer, None)  # holds no device now

    def _bulk(self, wants):
        """{consumer: {provider: {class: amount}}} of the consumers of
        ``wants`` (consumer -> wanted amounts) on the device providers
        their amounts name, one read per provider."""
        providers = sorted({rp for wanted in wants.values() for rp in wanted})
        found = {c: {} for c in wants}
        for rp in providers:
            _, allocs = self._client.get_provider_allocations(rp)
            for consumer, resources in allocs.items():
                if consumer in found:
                    found[consumer][rp] = resources
        return found

    def _heal(self, consumer, root, wanted):
        """Write the device amounts ``consumer``'s allocation lacks or has
        too many of.

        :returns: True when written, False when nothing was to be written
            (or Placement refused it: reported, not retried until its
            devices change), None on a conflict."""
        body = self._client.get_allocations(consumer)
        current = {rp: dict(a["resources"]) for rp, a in (body.get("allocations") or {}).items()}
        new = healed(current, root, wanted)
        if new is None:
            if not current.get(root) and missing(current, wanted):
                LOG.info(
                    "Consumer %s holds devices on this node but nothing on provider %s "
                    "(a move in flight elsewhere, or its allocation is gone): its device "
                    "allocations %s are not written",
                    consumer,
                    root,
                    wanted,
                )
            return False
        try:
            rewrite(self._client, consumer, new, body)
        except errors.GenerationConflict:
            LOG.info(
                "Consumer %s changed while its device allocations were written; next pass",
                consumer,
            )
            return None
        except errors.PlacementRequestFailed as exc:
            LOG.warning(
                "Placement refused the device allocations %s of consumer %s: %s",
                wanted,
                consumer,
                exc,
            )
            return False
        LOG.info(
            "Consumer %s: its allocation did not count the PCI devices its claim holds "
            "(a scheduler without PCI in Placement, or devices attached or detached); "
            "now %s",
            consumer,
            wanted,
        )
        return True


class PciDevicePass:
    """The PCI device allocations of one node (see
    :mod:`rtagent.placement.passes`)."""

    name = "pci_devices"

    def __init__(self, client):
        self._devices = DeviceAllocations(client)

    def run(self, node):
        if node.root is None or (not node.held and self._devices.idle):
            return node
        snapshot = node.tracker.snapshot()
        moves = snapshot.migrations
        # A resize on this node, or a standalone claim whose allocation is
        # being written: looked at once it is settled.
        same = {m.instance_uuid for m in moves if m.source_node == m.dest_node}
        moving = {m.instance_uuid: m.uuid for m in moves if m.source_node != m.dest_node}
        claimed = frozenset(i.uuid for i in snapshot.instances)
        busy = frozenset(same) | snapshot.pending
        self._devices.check(node.node_uuid, node.held, busy, moving, claimed)
        return node

    def status(self, known):
        return {}
