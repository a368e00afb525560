"""What the agent last saw of its tree in Placement, as one immutable value.

Two things, read together by :mod:`.reader`: the providers of the tree this
agent writes to, with their inventories, traits and generations (a
:class:`~rtagent.placement.tree.ProviderTree`), and the last listing of the
whole tree (``GET /resource_providers?in_tree=``), which also names
providers the agent does not copy (another service's children, children it
retired). A sync replaces the view whole; nothing here does I/O.
"""

import dataclasses

from rtagent.placement.tree import ProviderTree
from rtagent.resources import frozen_map


@dataclasses.dataclass(frozen=True)
class Listed:
    """One provider as the tree's listing gave it."""

    uuid: str
    name: str
    generation: int | None
    parent_uuid: str | None = None

    @classmethod
    def from_placement(cls, entry):
        """From one ``resource_providers`` entry of the listing."""
        return cls(
            uuid=entry["uuid"],
            name=entry["name"],
            generation=entry["generation"],
            parent_uuid=entry.get("parent_provider_uuid"),
        )


@dataclasses.dataclass(frozen=True)
class PlacementView:
    """:param tree: the providers as Placement holds them, generations
        included; only those of the tree that was synced.
    :param listed: uuid -> :class:`Listed`, the last listing as read. The
        writes of a sync change ``tree`` only: the listing stays what the
        read saw until the next read replaces it.
    """

    tree: ProviderTree = dataclasses.field(default_factory=ProviderTree)
    listed: object = dataclasses.field(default_factory=lambda: frozen_map({}))

    def get(self, uuid):
        """The cached provider ``uuid``, or None."""
        return self.tree.get(uuid)

    def generations(self):
        """uuid -> generation of the cached providers."""
        return self.tree.generations()

    def with_provider(self, provider):
        """A copy caching ``provider`` (as a write's answer left it)."""
        return dataclasses.replace(self, tree=self.tree.with_provider(provider))

    def without(self, uuid):
        """A copy that no longer caches ``uuid``: the next read re-reads it."""
        return dataclasses.replace(self, tree=self.tree.without(uuid))
