"""Child providers a driver stops reporting are deleted, and nothing else:
the agent removes only providers it put there itself (invariant 6)."""

import pytest

from rtagent.placement.errors import PlacementRequestFailed, ProviderNameTaken
from rtagent.placement.sync import ProviderSync, RememberedChildren
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map
from tests.functional.placement.conftest import get, make_provider, put_allocation

pytestmark = pytest.mark.functional

ROOT = "7c0ffee0-0000-4000-8000-000000000001"
SEV = "7c0ffee0-0000-4000-8000-000000000002"
GPU = "7c0ffee0-0000-4000-8000-000000000003"


def root():
    return Provider(uuid=ROOT, name="node", traits=frozenset({"COMPUTE_NODE"}))


def child(uuid, name, parent=ROOT, total=4):
    inv = Inventory(total=total, max_unit=total)
    return Provider(
        uuid=uuid,
        name=name,
        parent_uuid=parent,
        inventories=frozen_map({"CUSTOM_SLOT": inv}),
        managed_classes=frozenset({"CUSTOM_SLOT"}),
    )


def in_tree(operator):
    body = get(operator, f"/resource_providers?in_tree={ROOT}")
    return {p["uuid"] for p in body["resource_providers"]}


def test_a_child_no_longer_desired_is_deleted_and_others_stay(client, operator):
    sync = ProviderSync(client)
    sync.sync(ProviderTree([root(), child(SEV, "node_sev"), child(GPU, "node_gpu", SEV)]))
    theirs = make_provider(operator, "operator-child", parent=ROOT)
    assert in_tree(operator) == {ROOT, SEV, GPU, theirs}

    # The driver reports neither any more: the grandchild goes first.
    sync.sync(ProviderTree([root()]))
    assert in_tree(operator) == {ROOT, theirs}

    # A steady sync afterwards deletes nothing more and writes nothing.
    assert sync.sync(ProviderTree([root()])).operations == ()
    assert in_tree(operator) == {ROOT, theirs}


def test_a_child_with_allocations_is_kept_until_they_are_gone(client, operator):
    sync = ProviderSync(client)
    sync.sync(ProviderTree([root(), child(SEV, "node_sev")]))
    consumer = "7c0ffee0-0000-4000-8000-0000000000aa"
    put_allocation(operator, consumer, {SEV: {"CUSTOM_SLOT": 1}})

    sync.sync(ProviderTree([root()]))  # Placement refuses: in use
    assert SEV in in_tree(operator)

    operator.delete(f"/allocations/{consumer}")
    sync.sync(ProviderTree([root()]))  # tried again, now it goes
    assert in_tree(operator) == {ROOT}


def test_a_provider_never_desired_is_never_deleted(client, operator):
    sync = ProviderSync(client)
    sync.sync(ProviderTree([root()]))
    theirs = make_provider(operator, "someone-else", parent=ROOT)
    sync.sync(ProviderTree([root()]))
    assert theirs in in_tree(operator)


class _Meta:
    """The tracker store's metadata, as the builder hands it over: a dict
    here, with the writes counted."""

    def __init__(self):
        self.values = {}
        self.writes = 0

    def get(self, key):
        return self.values.get(key)

    def put(self, key, value):
        self.writes += 1
        self.values[key] = value


def remembered(meta):
    return RememberedChildren(meta.get, meta.put, "placement_children:node")


def test_a_child_dropped_while_the_agent_was_down_is_deleted_after_the_restart(client, operator):
    meta = _Meta()
    before = ProviderSync(client, children=remembered(meta))
    before.sync(ProviderTree([root(), child(SEV, "node_sev"), child(GPU, "node_gpu", SEV)]))
    theirs = make_provider(operator, "operator-child", parent=ROOT)

    # A new process: the driver no longer reports either child.
    after = ProviderSync(client, children=remembered(meta))
    after.sync(ProviderTree([root()]))
    assert in_tree(operator) == {ROOT, theirs}
    assert remembered(meta).load() == frozenset()


def test_the_memory_is_written_only_when_the_children_change(client, operator):
    meta = _Meta()
    sync = ProviderSync(client, children=remembered(meta))
    tree = ProviderTree([root(), child(SEV, "node_sev")])
    sync.sync(tree)
    assert meta.writes == 1
    assert remembered(meta).load() == {SEV}
    for _ in range(3):
        sync.sync(tree)
    assert meta.writes == 1


def test_a_provider_never_published_is_not_deleted_after_a_restart(client, operator):
    meta = _Meta()
    ProviderSync(client, children=remembered(meta)).sync(ProviderTree([root()]))
    theirs = make_provider(operator, "someone-else", parent=ROOT)
    ProviderSync(client, children=remembered(meta)).sync(ProviderTree([root()]))
    assert theirs in in_tree(operator)


SEV_AGAIN = "7c0ffee0-0000-4000-8000-000000000004"


def test_a_child_reported_under_a_new_uuid_keeps_its_own_and_its_allocations(client, operator):
    # nova's virt drivers, handed a fresh provider tree, make up a UUID for
    # each child: the same name is the same provider.
    meta = _Meta()
    ProviderSync(client, children=remembered(meta)).sync(
        ProviderTree([root(), child(SEV, "node_sev")])
    )
    consumer = "7c0ffee0-0000-4000-8000-0000000000ab"
    put_allocation(operator, consumer, {SEV: {"CUSTOM_SLOT": 1}})

    sync = ProviderSync(client, children=remembered(meta))  # a restart
    for total in (4, 6, 6):  # twice the same: no write the second time
        result = sync.sync(ProviderTree([root(), child(SEV_AGAIN, "node_sev", total=total)]))
        assert in_tree(operator) == {ROOT, SEV}
        assert [p.uuid for p in result.tree] == [ROOT, SEV]
    assert result.operations == ()
    inventory = get(operator, f"/resource_providers/{SEV}/inventories")["inventories"]
    assert inventory["CUSTOM_SLOT"]["total"] == 6
    assert get(operator, f"/allocations/{consumer}")["allocations"][SEV]
    assert remembered(meta).load() == {SEV}


def test_a_new_uuid_under_a_name_someone_else_has_is_not_taken_over(client, operator):
    sync = ProviderSync(client)
    sync.sync(ProviderTree([root()]))
    theirs = make_provider(operator, "node_other", parent=ROOT)
    with pytest.raises(ProviderNameTaken):
        sync.sync(ProviderTree([root(), child(SEV, "node_other")]))
    assert in_tree(operator) == {ROOT, theirs}


def test_a_child_created_by_a_sync_that_then_failed_is_still_known_as_ours(client, operator):
    meta = _Meta()
    sync = ProviderSync(client, children=remembered(meta))
    sync.sync(ProviderTree([root()]))
    refused = Provider(
        uuid=SEV,
        name="node_sev",
        parent_uuid=ROOT,
        # Placement refuses a reserved amount above the total (after the
        # provider itself was created).
        inventories=frozen_map({"CUSTOM_SLOT": Inventory(total=4, max_unit=4, reserved=5)}),
        managed_classes=frozenset({"CUSTOM_SLOT"}),
    )
    with pytest.raises(PlacementRequestFailed):
        sync.sync(ProviderTree([root(), refused]))
    assert SEV in in_tree(operator)
    assert remembered(meta).load() == {SEV}

    # After a restart the driver names it anew: the same provider.
    after = ProviderSync(client, children=remembered(meta))
    after.sync(ProviderTree([root(), child(SEV_AGAIN, "node_sev")]))
    assert in_tree(operator) == {ROOT, SEV}


@pytest.mark.parametrize("raw", ["not json", '{"a": 1}', "[1, 2]"])
def test_an_unreadable_memory_is_ignored_with_a_warning(raw, caplog):
    meta = _Meta()
    meta.values["placement_children:node"] = raw
    assert remembered(meta).load() == frozenset()
    assert "unreadable record placement_children:node" in caplog.text
