"""Child providers a driver stops reporting are deleted, and nothing else:
the agent removes only providers it put there itself (invariant 6)."""

import pytest

from rtagent.placement.sync import ProviderSync
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
