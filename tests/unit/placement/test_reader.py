"""The pure parts of a read: the view's helpers and the "same names" rule
that keeps a child provider under the UUID Placement knows it by."""

import pytest

from rtagent.placement.reader import same_names
from rtagent.placement.seen import Listed, PlacementView
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import frozen_map

ROOT = "11111111-1111-1111-1111-111111111111"
OLD = "22222222-2222-2222-2222-222222222222"
NEW = "33333333-3333-3333-3333-333333333333"
GRANDCHILD = "44444444-4444-4444-4444-444444444444"


def listing(*entries):
    return frozen_map({e.uuid: e for e in entries})


def desired(child_uuid=NEW, child_name="node1_pf0", grandchild=False):
    providers = [Provider(ROOT, "node1"), Provider(child_uuid, child_name, ROOT)]
    if grandchild:
        providers.append(Provider(GRANDCHILD, "node1_pf0_vf0", child_uuid))
    return ProviderTree(providers)


PUBLISHED = listing(Listed(ROOT, "node1", 4), Listed(OLD, "node1_pf0", 2, ROOT))


@pytest.mark.parametrize(
    "tree, listed, ours, kept_as",
    [
        # Published before under OLD, reported now under NEW: kept as OLD.
        (desired(), PUBLISHED, {OLD}, OLD),
        # Not one of ours (another service's child of the same name).
        (desired(), PUBLISHED, set(), NEW),
        # Another name: a new child, not the old one.
        (desired(child_name="node1_pf1"), PUBLISHED, {OLD}, NEW),
        # The new UUID is in Placement already: nothing to substitute.
        (desired(), listing(*PUBLISHED.values(), Listed(NEW, "x", 0, ROOT)), {OLD}, NEW),
        # The old one is still desired under its own UUID.
        (desired(child_uuid=OLD), PUBLISHED, {OLD}, OLD),
    ],
)
def test_a_child_keeps_the_uuid_its_name_has_in_placement(tree, listed, ours, kept_as):
    synced = same_names(tree, listed, ours)
    child = [p for p in synced if p.parent_uuid == ROOT]
    assert [p.uuid for p in child] == [kept_as]


def test_grandchildren_follow_their_parent_to_its_old_uuid():
    synced = same_names(desired(grandchild=True), PUBLISHED, {OLD})
    assert synced.get(GRANDCHILD).parent_uuid == OLD
    assert NEW not in synced


def test_the_view_is_replaced_never_changed():
    listed = listing(Listed(ROOT, "node1", 4))
    view = PlacementView(ProviderTree([Provider(ROOT, "node1", generation=4)]), listed)
    moved = view.with_provider(Provider(ROOT, "node1", generation=5))
    dropped = view.without(ROOT)
    assert view.generations() == {ROOT: 4}
    assert moved.generations() == {ROOT: 5}
    assert dropped.get(ROOT) is None and dropped.generations() == {}
    # The writes of a sync change the providers, never the listing it read.
    assert moved.listed is listed and dropped.listed is listed


def test_a_listing_entry_reads_placement_fields():
    entry = Listed.from_placement(
        {"uuid": OLD, "name": "pf0", "generation": 2, "parent_provider_uuid": ROOT}
    )
    assert entry == Listed(OLD, "pf0", 2, ROOT)
