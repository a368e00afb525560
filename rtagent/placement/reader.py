"""Read the tree from Placement, cheaply: a new view from the last one.

Each read lists the tree's providers and their generations in ONE request
(``GET /resource_providers?in_tree=ROOT``), plus one per root a virt
driver reports beside the node's (a sharing provider). A provider whose generation is
the one last seen is unchanged, so its cached inventories and traits are
reused; only providers that moved are read again. With nothing changed a
read costs one request, whatever the size of the node.

The read also settles which tree is synced: a child provider this agent
published before, reported now under a new UUID but the same name, is kept
under its UUID in Placement (:func:`same_names`).
"""

import logging

from rtagent.placement import errors
from rtagent.placement.seen import Listed, PlacementView
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map

# The sync's logger: these lines are part of what an operator reads as the
# sync (docs/operations.md), whichever module now writes them.
LOG = logging.getLogger("rtagent.placement.sync")

# Inventories and traits are read by two requests; if someone writes between
# them the generations differ and we read again, at most this many times.
_CONSISTENT_READ_ATTEMPTS = 3


def refresh(client, view, root, desired, ours):
    """Read the tree's listing and each provider whose generation moved.

    :param view: the :class:`~rtagent.placement.seen.PlacementView` last read.
    :param desired: the tree to sync; only its providers are copied (another
        service's child provider in our tree is never written to).
    :param ours: UUIDs of the child providers this agent published.
    :returns: (the new view, ``desired`` or the tree to sync in its place).
    :raises ProviderChanging: a provider kept changing between two reads.
    :raises PlacementUnavailable: a read failed; nothing was written.
    """
    entries = list(client.list_tree(root))
    # The roots a virt driver reports beside the node's (sharing providers):
    # one listing each, only while the driver reports them.
    for sharing in sorted(p.uuid for p in desired if p.sharing):
        entries.extend(client.list_tree(sharing))
    listed = frozen_map({e["uuid"]: Listed.from_placement(e) for e in entries})
    desired = same_names(desired, listed, ours)
    providers = []
    for entry in listed.values():
        want = desired.get(entry.uuid)
        if want is None:
            continue
        aggregates = manages_aggregates(want)
        cached = view.get(entry.uuid)
        if (
            cached is not None
            and cached.generation == entry.generation
            and (cached.aggregates is not None or not aggregates)
        ):
            providers.append(cached.replace(name=entry.name, parent_uuid=entry.parent_uuid))
        else:
            providers.append(read_provider(client, entry, aggregates=aggregates))
    return PlacementView(ProviderTree(providers), listed), desired


def manages_aggregates(provider):
    """Whether the desired ``provider``'s aggregates are the agent's to
    write, so that they must be read (a third GET, only for such ones)."""
    return provider is not None and bool(provider.aggregates or provider.managed_aggregates)


def read_provider(client, entry, aggregates=False):
    """One provider's inventories and traits (and its aggregates if
    ``aggregates``), read at one generation.

    :param entry: its :class:`~rtagent.placement.seen.Listed` (name, parent).
    :raises ProviderChanging: its generation moved between the GETs every
        time.
    """
    for _ in range(_CONSISTENT_READ_ATTEMPTS):
        inv_gen, inventories = client.get_inventories(entry.uuid)
        trait_gen, traits = client.get_traits(entry.uuid)
        agg_gen, aggs = client.get_aggregates(entry.uuid) if aggregates else (inv_gen, None)
        if inv_gen == trait_gen == agg_gen:
            break
    else:
        # Someone keeps writing to it: let the retry policy pace us
        # rather than write on a torn read.
        raise errors.ProviderChanging(uuid=entry.uuid)
    return Provider(
        uuid=entry.uuid,
        name=entry.name,
        parent_uuid=entry.parent_uuid,
        generation=inv_gen,
        inventories=frozen_map({rc: Inventory.from_placement(d) for rc, d in inventories.items()}),
        traits=traits,
        aggregates=aggs,
    )


def same_names(desired, listed, ours):
    """``desired`` with each child provider this agent published before
    under its UUID in Placement, where the tree reports it under a new
    one: a provider name is unique in Placement, so the same name is the
    same provider (nova's virt drivers, handed a fresh provider tree,
    make up a UUID for each child). Allocations against it stay valid.

    :param listed: uuid -> :class:`~rtagent.placement.seen.Listed`.
    :param ours: UUIDs of the child providers this agent published.
    """
    wanted = {p.uuid for p in desired}
    by_name = {
        entry.name: uuid for uuid, entry in listed.items() if uuid in ours and uuid not in wanted
    }
    same = {
        p.uuid: by_name[p.name]
        for p in desired
        if p.parent_uuid is not None and p.uuid not in listed and p.name in by_name
    }
    if not same:
        return desired
    LOG.debug("Child providers reported under new UUIDs, kept as in Placement: %s", same)
    return ProviderTree(
        p.replace(uuid=same.get(p.uuid, p.uuid), parent_uuid=same.get(p.parent_uuid, p.parent_uuid))
        for p in desired
    )
