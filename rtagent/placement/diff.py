"""The pure difference between the desired tree and Placement's view.

``diff(desired, view)`` returns the operations that make Placement hold what
the agent wants, and nothing more: no operation when they already agree.
Three ownership rules keep us from clobbering others:

* traits: only ``managed_traits`` are added or removed; every other trait on
  the provider (set by an operator or another service) is carried over;
* inventories: only ``managed_classes`` (and the desired ones) are written
  or removed; any other class's inventory is carried over as Placement has
  it (Placement replaces a provider's inventories as a whole);
* an ``owned`` provider (one the agent made for a PCI device) is wholly the
  agent's: its inventories and traits are exactly the desired ones;
* allocation ratios: an inventory whose desired ratio is None keeps the ratio
  Placement has (an operator may set it through the API), or takes the
  provider's ``ratio_defaults`` when the inventory is new;
* reserved, for the provider's ``sticky_reserved`` classes: never lowered
  by us (Placement's value is kept when higher), only by someone else;
* aggregates, as traits: only ``managed_aggregates`` are added or removed
  (a provider whose desired ``aggregates`` is None has none managed).

Providers present in Placement but not desired are left alone.
"""

import dataclasses

_INVENTORY_FIELDS = (
    "total",
    "reserved",
    "min_unit",
    "max_unit",
    "step_size",
    "allocation_ratio",
)


@dataclasses.dataclass(frozen=True)
class CreateProvider:
    uuid: str
    name: str
    parent_uuid: str | None


@dataclasses.dataclass(frozen=True)
class UpdateProvider:
    """Rename: the hypervisor hostname changed, the node's UUID did not."""

    uuid: str
    name: str
    parent_uuid: str | None


@dataclasses.dataclass(frozen=True)
class SetInventories:
    uuid: str
    inventories: dict  # resource class -> inventory dict, ratios resolved


@dataclasses.dataclass(frozen=True)
class SetTraits:
    uuid: str
    traits: frozenset


@dataclasses.dataclass(frozen=True)
class SetAggregates:
    uuid: str
    aggregates: frozenset


def resolve_inventories(desired, current):
    """The full inventory set to write: foreign classes as Placement has
    them, ours as desired, with unmanaged ratios filled in.

    :param desired: the desired :class:`~rtagent.placement.tree.Provider`.
    :param current: the provider as last seen in Placement, or None.
    """
    current_invs = current.inventories if current else {}
    ours = desired.managed_classes | frozenset(desired.inventories)
    if desired.owned:
        ours |= frozenset(current_invs)
    resolved = {
        rc: {f: getattr(inv, f) for f in _INVENTORY_FIELDS}
        for rc, inv in current_invs.items()
        if rc not in ours
    }
    for rc, inv in desired.inventories.items():
        record = {f: getattr(inv, f) for f in _INVENTORY_FIELDS}
        if record["allocation_ratio"] is None:
            existing = current_invs.get(rc)
            if existing is not None:
                record["allocation_ratio"] = existing.allocation_ratio
            else:
                record["allocation_ratio"] = desired.ratio_defaults.get(rc, 1.0)
        existing = current_invs.get(rc)
        if rc in desired.sticky_reserved and existing is not None:
            record["reserved"] = min(record["total"], max(record["reserved"], existing.reserved))
        resolved[rc] = record
    return resolved


def merged_traits(desired, current_traits):
    """The trait set to write: others' traits kept, ours as desired."""
    if desired.owned:
        return frozenset(desired.traits)
    foreign = current_traits - desired.managed_traits - desired.traits
    return frozenset(foreign | desired.traits)


def merged_aggregates(desired, current):
    """The aggregate set to write, or None when ``desired`` manages none:
    others' aggregates kept, ours as desired. ``current`` is None for a
    provider not in Placement yet (it has none)."""
    if desired.aggregates is None and not desired.managed_aggregates:
        return None
    wanted = desired.aggregates or frozenset()
    current = current or frozenset()
    return frozenset((current - desired.managed_aggregates - wanted) | wanted)


def _inventory_records(provider):
    return {
        rc: {f: getattr(inv, f) for f in _INVENTORY_FIELDS}
        for rc, inv in provider.inventories.items()
    }


def diff(desired, view):
    """Operations that bring ``view`` (Placement) to ``desired``, in order.

    :param desired: :class:`~rtagent.placement.tree.ProviderTree` wanted.
    :param view: :class:`~rtagent.placement.tree.ProviderTree` last read.
    :returns: a list of operations, parents before children.
    """
    ops = []
    for want in desired:
        have = view.get(want.uuid)
        if have is None:
            ops.append(CreateProvider(want.uuid, want.name, want.parent_uuid))
            current_traits = frozenset()
            current_invs = {}
        else:
            if (have.name, have.parent_uuid) != (want.name, want.parent_uuid):
                ops.append(UpdateProvider(want.uuid, want.name, want.parent_uuid))
            current_traits = have.traits
            current_invs = _inventory_records(have)
        # Traits first: an inventory write that Placement refuses (e.g. a
        # class still in use) must not hold back the node's traits.
        traits = merged_traits(want, current_traits)
        if traits != current_traits:
            ops.append(SetTraits(want.uuid, traits))
        invs = resolve_inventories(want, have)
        if invs != current_invs:
            ops.append(SetInventories(want.uuid, invs))
        current_aggs = have.aggregates if have is not None else frozenset()
        aggs = merged_aggregates(want, current_aggs)
        if aggs is not None and aggs != current_aggs:
            ops.append(SetAggregates(want.uuid, aggs))
    return ops
