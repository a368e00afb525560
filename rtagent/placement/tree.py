"""Provider trees as pure, immutable data.

The same types describe what the agent wants in Placement (the *desired*
tree, generations None) and what it last saw there (the *view*, with
generations). Nothing here does I/O; every "change" returns a new tree.
"""

import dataclasses

from rtagent.resources import frozen_map


@dataclasses.dataclass(frozen=True)
class Provider:
    """One resource provider.

    :param inventories: resource class -> :class:`rtagent.tracker.model.Inventory`.
    :param managed_traits: (desired trees only) traits whose presence this
        agent decides: absent from ``traits`` means remove. Any other trait
        on the provider belongs to someone else and is left alone.
    :param managed_classes: (desired trees only) resource classes whose
        inventory this agent decides: absent from ``inventories`` means
        remove. Inventories of other classes (added by an operator or
        another service) are carried over untouched.
    :param owned: (desired trees only) every inventory and trait of the
        provider is this agent's to decide (a provider it made for a PCI
        device, as nova owns its own): a class or trait it no longer
        reports is removed, whatever it was.
    :param ratio_defaults: (desired trees only) resource class -> ratio for
        an inventory whose ``allocation_ratio`` is None when Placement has
        no value yet (the ``initial_*_allocation_ratio`` options).
    :param sticky_reserved: (desired trees only) classes whose ``reserved``
        never goes down by this agent's writes: Placement's value is kept
        when higher than the desired one, so only someone else (an
        operator) lowers it (a one-time-use PCI device stays reserved after
        its free until it is made ready again).
    :param aggregates: the provider's aggregate UUIDs. In a view, None
        when they were not read (the agent reads them only for providers
        whose aggregates it manages). In a desired tree, those the agent
        wants the provider in, or None: aggregates not managed at all.
    :param managed_aggregates: (desired trees only) aggregates whose
        membership this agent decides, as ``managed_traits`` for traits:
        any other aggregate (nova-api mirrors host aggregates onto the
        node's root) is left alone.
    :param sharing: (desired trees only) a root provider that the node's
        virt driver reports beside the node's own root (a provider sharing
        its inventory through an aggregate, e.g. shared storage). It is
        created and written, never deleted by this agent: other hosts may
        report it too.
    """

    uuid: str
    name: str
    parent_uuid: str | None = None
    generation: int | None = None
    inventories: object = dataclasses.field(default_factory=lambda: frozen_map({}))
    traits: frozenset = frozenset()
    managed_traits: frozenset = frozenset()
    managed_classes: frozenset = frozenset()
    owned: bool = False
    ratio_defaults: object = dataclasses.field(default_factory=lambda: frozen_map({}))
    sticky_reserved: frozenset = frozenset()
    aggregates: frozenset | None = None
    managed_aggregates: frozenset = frozenset()
    sharing: bool = False

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


class ProviderTree:
    """An immutable set of providers, iterated parents before children."""

    def __init__(self, providers=()):
        self._by_uuid = {p.uuid: p for p in providers}

    def get(self, uuid):
        return self._by_uuid.get(uuid)

    def __contains__(self, uuid):
        return uuid in self._by_uuid

    def __len__(self):
        return len(self._by_uuid)

    def __eq__(self, other):
        if not isinstance(other, ProviderTree):
            return NotImplemented
        return self._by_uuid == other._by_uuid

    __hash__ = None  # mutable-looking containers compare by value only

    def __iter__(self):
        """Providers ordered so that a parent always precedes its children."""
        done, ordered = set(), []

        def visit(provider):
            if provider.uuid in done:
                return
            parent = self._by_uuid.get(provider.parent_uuid)
            if parent is not None:
                visit(parent)
            done.add(provider.uuid)
            ordered.append(provider)

        for uuid in sorted(self._by_uuid):
            visit(self._by_uuid[uuid])
        return iter(ordered)

    def with_provider(self, provider):
        """A copy with ``provider`` added or replaced."""
        providers = dict(self._by_uuid)
        providers[provider.uuid] = provider
        return ProviderTree(providers.values())

    def without(self, uuid):
        """A copy without ``uuid`` (no-op if absent)."""
        return ProviderTree(p for u, p in self._by_uuid.items() if u != uuid)

    def generations(self):
        """uuid -> generation, for change detection."""
        return {u: p.generation for u, p in self._by_uuid.items()}
