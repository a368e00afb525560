"""The last synced view's record: pure encode/decode, stable digests."""

import json

import pytest

from rtagent.placement import checkpoint
from rtagent.placement.checkpoint import MetaRecord
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map

ROOT = "11111111-0000-4000-8000-000000000001"
CHILD = "11111111-0000-4000-8000-000000000002"

VIEW = ProviderTree(
    [
        Provider(
            ROOT,
            "host",
            generation=7,
            inventories=frozen_map({"VCPU": Inventory(total=8, allocation_ratio=4.0)}),
            traits=frozenset({"COMPUTE_NODE", "CUSTOM_X"}),
        ),
        Provider(CHILD, "host_pf", parent_uuid=ROOT, generation=3),
    ]
)


def test_a_record_round_trips_through_json():
    record = json.loads(json.dumps(checkpoint.encode(VIEW, VIEW, frozenset({"a", "b"}))))
    view, reported, local = checkpoint.decode(record)
    assert view == VIEW
    assert reported == checkpoint.digest(VIEW)
    assert local == checkpoint.digest(frozenset({"b", "a"}))


@pytest.mark.parametrize(
    "a, b, same",
    [
        (frozenset({"x", "y", "z"}), frozenset({"z", "y", "x"}), True),
        (frozenset({"x"}), frozenset({"x", "y"}), False),
        (VIEW, ProviderTree(reversed(list(VIEW))), True),
        (VIEW, VIEW.without(CHILD), False),
        (VIEW, VIEW.with_provider(VIEW.get(ROOT).replace(traits=frozenset())), False),
        (None, frozenset(), False),
    ],
)
def test_digests_are_equal_exactly_for_equal_values(a, b, same):
    assert (checkpoint.digest(a) == checkpoint.digest(b)) is same


@pytest.mark.parametrize(
    "record",
    [
        {"version": 0, "reported": "r", "local": "l", "view": []},
        {"version": checkpoint.VERSION, "reported": "r", "local": "l"},
        {"version": checkpoint.VERSION, "reported": "r", "local": "l", "view": [{"uuid": 1}]},
        {"version": checkpoint.VERSION, "reported": "r", "local": "l", "view": "nope"},
    ],
)
def test_a_record_of_another_version_or_unreadable_is_ignored(record):
    assert checkpoint.decode(record) is None


def test_an_unreadable_stored_value_loads_as_none():
    meta = {"k": "{not json"}
    assert MetaRecord(meta.get, meta.__setitem__, "k").load() is None
    assert MetaRecord(meta.get, meta.__setitem__, "other").load() is None
