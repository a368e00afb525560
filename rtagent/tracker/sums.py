"""What a node's instances use, summed, and kept up to date as they come and go.

A claim checks its fit against what the node already holds. Adding up
every instance for each claim is O(N) Python work under the tracker lock;
these sums are carried from one state to the next instead, adjusted by the
one instance an operation adds or removes. Moves still count from their
own records (:func:`rtagent.tracker.ledger.move_holdings`): there are few.
"""

import dataclasses
import types

from rtagent.numa.usage import NumaUsage
from rtagent.resources import frozen_map
from rtagent.tracker import stats as stats_mod


@dataclasses.dataclass(frozen=True, eq=False)
class InstanceSums:
    """Sums over one instances mapping.

    :param of: the mapping these are the sums of; they are valid for that
        very object only (see :meth:`valid_for`).
    :param amounts: resource class -> total of the instances' resources.
    :param ids: resource class -> {identifier: how many instances hold it}
        (assigned resources; a class appears while some instance holds one).
    :param numa: the :class:`~rtagent.numa.usage.NumaUsage` of the
        instances' NUMA claims.
    :param pci: instance UUID -> the PCI devices it holds, for the
        instances that hold any (so that the node's device table is rebuilt
        from the few that do, not from every instance).
    :param stats: nova's stats key -> instances counted in it
        (:func:`rtagent.tracker.stats.counts_of`), so that the compute-node
        view after a claim does not count every instance again.
    """

    of: object
    amounts: types.MappingProxyType
    ids: types.MappingProxyType
    numa: NumaUsage = dataclasses.field(default_factory=NumaUsage)
    pci: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    stats: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))

    @classmethod
    def over(cls, instances):
        """Sum ``instances`` (O(N): a new state, a restore)."""
        amounts, ids = {}, {}
        for instance in instances.values():
            _add(amounts, ids, instance, 1)
        numa = NumaUsage.of(i.numa for i in instances.values() if i.numa is not None)
        pci = frozen_map({i.uuid: i.pci_devices for i in instances.values() if i.pci_devices})
        counts = frozen_map(stats_mod.counts_of(instances.values()))
        return cls(instances, frozen_map(amounts), _freeze_ids(ids), numa, pci, counts)

    def valid_for(self, instances):
        return self.of is instances

    def changed(self, instances, removed=None, added=None):
        """The sums of ``instances``: this mapping less ``removed`` plus
        ``added`` (Instances, or None). O(resource classes)."""
        amounts = dict(self.amounts)
        ids = self.ids
        if (removed is not None and removed.assigned) or (added is not None and added.assigned):
            ids = {rc: dict(counts) for rc, counts in ids.items()}
        for instance, sign in ((removed, -1), (added, 1)):
            if instance is not None:
                _add(amounts, ids, instance, sign)
        if ids is not self.ids:
            ids = _freeze_ids(ids)
        numa = self.numa
        gone, new = _numa_of(removed), _numa_of(added)
        if gone or new:
            numa = numa.changed(gone, new)
        pci = self.pci
        if _pci_of(removed) or _pci_of(added):
            held = dict(pci)
            if removed is not None:
                held.pop(removed.uuid, None)
            if added is not None and added.pci_devices:
                held[added.uuid] = added.pci_devices
            pci = frozen_map(held)
        counts = dict(self.stats)
        for instance, sign in ((removed, -1), (added, 1)):
            if instance is not None:
                for key in stats_mod.keys_of(instance):
                    counts[key] = counts.get(key, 0) + sign
                    if not counts[key]:
                        del counts[key]
        return InstanceSums(instances, frozen_map(amounts), ids, numa, pci, frozen_map(counts))

    def ids_in_use(self):
        """Resource class -> set of identifiers some instance holds."""
        return {rc: set(counts) for rc, counts in self.ids.items()}


def _pci_of(instance):
    return instance.pci_devices if instance is not None else ()


def _numa_of(instance):
    return [instance.numa] if instance is not None and instance.numa is not None else []


def _add(amounts, ids, instance, sign):
    for rc, amount in instance.resources.items():
        amounts[rc] = amounts.get(rc, 0) + sign * amount
    for rc, held in instance.assigned.items():
        counts = ids.setdefault(rc, {})
        for ident in held:
            left = counts.get(ident, 0) + sign
            if left:
                counts[ident] = left
            else:
                counts.pop(ident, None)
        if not counts:
            del ids[rc]


def _freeze_ids(ids):
    return frozen_map({rc: frozen_map(counts) for rc, counts in ids.items()})
