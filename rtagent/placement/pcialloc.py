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

from rtagent.placement import allocations, errors

LOG = logging.getLogger(__name__)


def healed(current, root, wanted):
    """``current`` with the device amounts of ``wanted`` (pure).

    :param current: {provider: {class: amount}}, the consumer's allocation
        as Placement holds it.
    :param root: the node's root provider UUID.
    :param wanted: {provider: {class: amount}}, the devices the node's
        claims hold for the consumer, by provider.
    :returns: the new {provider: {class: amount}}, or None when there is
        nothing to write (already right, or nothing held on ``root``).
    """
    if not current.get(root):
        return None
    result = {rp: dict(res) for rp, res in current.items()}
    changed = False
    for rp, classes in wanted.items():
        on_rp = result.setdefault(rp, {})
        for rc, amount in classes.items():
            if on_rp.get(rc) != amount:
                on_rp[rc] = amount
                changed = True
    return result if changed else None


def missing(current, wanted):
    """Whether ``current`` lacks any amount of ``wanted`` (both
    {provider: {class: amount}}; pure)."""
    return any(
        current.get(rp, {}).get(rc) != amount
        for rp, classes in wanted.items()
        for rc, amount in classes.items()
    )


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

    def check(self, root, held, busy=frozenset(), moving=None):
        """Look at the consumers of ``held`` not checked for their current
        devices and moves.

        :param root: the node's root provider UUID.
        :param held: {consumer: {provider: {class: amount}}}, the devices
            the node's claims hold on its PCI providers (see
            :class:`~rtagent.placement.pci.Report`).
        :param busy: consumers left alone for now: instances in a move
            whose source and destination are this node, standalone claims
            being written.
        :param moving: {instance: migration} of the moves in flight between
            this node and another: a consumer is looked at again when its
            move starts or ends (its allocation on this node changes hands).
        :returns: the consumers whose allocation was written, sorted.
        :raises PlacementUnavailable: stop; the next pass looks again.
        """
        moving = moving or {}
        state = (held, moving, busy)
        if state == self._settled:
            return ()
        marks = {c: (w, moving.get(c)) for c, w in held.items() if c not in busy}
        self._checked = {c: m for c, m in self._checked.items() if marks.get(c) == m}
        new = sorted(c for c in marks if c not in self._checked)
        found = self._bulk(new, held) if len(new) > self._max_reads else {}
        done = []
        conflicts = False
        for consumer in new:
            wanted = held[consumer]
            if consumer in found and not missing(found[consumer], wanted):
                self._checked[consumer] = marks[consumer]
                continue
            written = self._heal(consumer, root, wanted)
            if written is None:
                conflicts = True  # looked at again on the next pass
                continue
            if written:
                done.append(consumer)
            self._checked[consumer] = marks[consumer]
        if not conflicts:
            self._settled = (dict(held), dict(moving), frozenset(busy))
        return tuple(done)

    def _bulk(self, consumers, held):
        """{consumer: {provider: {class: amount}}} of ``consumers`` on the
        device providers they hold, one read per provider."""
        providers = sorted({rp for c in consumers for rp in held[c]})
        found = {}
        wanted = set(consumers)
        for rp in providers:
            _, allocs = self._client.get_provider_allocations(rp)
            for consumer, resources in allocs.items():
                if consumer in wanted:
                    found.setdefault(consumer, {})[rp] = resources
        for consumer in consumers:
            found.setdefault(consumer, {})
        return found

    def _heal(self, consumer, root, wanted):
        """Write what ``consumer``'s allocation lacks.

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
                    "allocations %s are not added",
                    consumer,
                    root,
                    wanted,
                )
            return False
        try:
            allocations.rewrite(self._client, consumer, new, body)
        except errors.GenerationConflict:
            LOG.info(
                "Consumer %s changed while its device allocations were added; next pass", consumer
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
            "Consumer %s held PCI devices that its allocation did not count (a "
            "scheduler without PCI in Placement): added %s",
            consumer,
            wanted,
        )
        return True
