"""Inventory that moves from the root to a child while allocated: one
atomic POST /reshaper, with conflict retry (real Placement app)."""

import uuid

import pytest

from rtagent.placement import errors
from rtagent.placement.client import PlacementClient
from rtagent.placement.sync import ProviderSync
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map
from tests.functional.placement.conftest import (
    allocations_of,
    get,
    make_provider,
    put_allocation,
)

pytestmark = pytest.mark.functional

ROOT = "aaaaaaaa-0000-4000-8000-000000000001"
NUMA0 = "aaaaaaaa-0000-4000-8000-000000000002"
NUMA1 = "aaaaaaaa-0000-4000-8000-000000000003"
MANAGED = frozenset({"VCPU", "MEMORY_MB"})


def invs(**totals):
    return frozen_map({rc: Inventory(total=t, max_unit=t) for rc, t in totals.items()})


def flat():
    return ProviderTree(
        [
            Provider(
                ROOT,
                "host-r",
                inventories=invs(VCPU=8, MEMORY_MB=4096),
                traits=frozenset({"COMPUTE_NODE"}),
                managed_traits=frozenset({"COMPUTE_NODE"}),
                managed_classes=MANAGED,
            )
        ]
    )


def nested(*children):
    root = flat().get(ROOT).replace(inventories=invs(MEMORY_MB=4096))
    kids = [
        Provider(
            uuid,
            f"host-r_numa{i}",
            parent_uuid=ROOT,
            inventories=invs(VCPU=8),
            managed_classes=MANAGED,
        )
        for i, uuid in enumerate(children)
    ]
    return ProviderTree([root, *kids])


@pytest.fixture
def our_client(service_adapter, recorder):
    return PlacementClient(service_adapter, recorder)


def test_vcpu_moves_to_a_child_with_its_allocations_atomically(our_client, operator, recorder):
    sync = ProviderSync(our_client, sleep=lambda s: None)
    sync.sync(flat())
    other = make_provider(operator, "shared", inventories={"DISK_GB": {"total": 50}})
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    put_allocation(operator, x, {ROOT: {"VCPU": 2, "MEMORY_MB": 512}})
    put_allocation(
        operator, y, {ROOT: {"VCPU": 1}, other: {"DISK_GB": 5}}, consumer_type="MIGRATION"
    )
    before = {c: get(operator, f"/allocations/{c}")["consumer_generation"] for c in (x, y)}

    result = sync.sync(nested(NUMA0))
    assert [(m.resource_class, m.source, m.dest) for m in result.reshaped] == [
        ("VCPU", ROOT, NUMA0)
    ]
    assert allocations_of(operator, x) == {ROOT: {"MEMORY_MB": 512}, NUMA0: {"VCPU": 2}}
    assert allocations_of(operator, y) == {NUMA0: {"VCPU": 1}, other: {"DISK_GB": 5}}
    body = get(operator, f"/allocations/{y}")
    assert body["consumer_type"] == "MIGRATION"
    assert body["consumer_generation"] == before[y] + 1
    root_invs = get(operator, f"/resource_providers/{ROOT}/inventories")["inventories"]
    assert set(root_invs) == {"MEMORY_MB"}
    assert get(operator, f"/resource_providers/{NUMA0}/usages")["usages"] == {"VCPU": 3}
    assert [u for m, u, _ in recorder.requests if m == "POST"][-1] == "/reshaper"

    # the reshaped providers are re-read once, then steady state again
    assert sync.sync(nested(NUMA0)).operations == ()
    recorder.reset()
    assert sync.sync(nested(NUMA0)).operations == ()
    assert recorder.count() == 1


def test_a_conflicting_writer_during_the_reshape_is_retried(our_client, operator, recorder):
    sync = ProviderSync(our_client, sleep=lambda s: None)
    sync.sync(flat())
    x = str(uuid.uuid4())
    put_allocation(operator, x, {ROOT: {"VCPU": 2}})
    operator.put("/traits/CUSTOM_WRITER")

    def interfere(method, url):
        if method == "POST" and url == "/reshaper":
            recorder.hook = None
            gen = get(operator, f"/resource_providers/{ROOT}")["generation"]
            resp = operator.put(
                f"/resource_providers/{ROOT}/traits",
                json={
                    "resource_provider_generation": gen,
                    "traits": ["COMPUTE_NODE", "CUSTOM_WRITER"],
                },
            )
            assert resp.status_code == 200, resp.text

    recorder.hook = interfere
    result = sync.sync(nested(NUMA0))
    assert result.attempts == 2
    assert (409, "/reshaper") in [(s, u) for m, u, s in recorder.requests if m == "POST"]
    assert allocations_of(operator, x) == {NUMA0: {"VCPU": 2}}
    traits = get(operator, f"/resource_providers/{ROOT}/traits")["traits"]
    assert set(traits) == {"COMPUTE_NODE", "CUSTOM_WRITER"}


def test_without_allocations_no_reshape_is_needed(our_client, operator, recorder):
    sync = ProviderSync(our_client)
    sync.sync(flat())
    result = sync.sync(nested(NUMA0))
    assert result.reshaped == ()
    assert "/reshaper" not in [u for _, u, _ in recorder.requests]
    assert "VCPU" in get(operator, f"/resource_providers/{NUMA0}/inventories")["inventories"]


def test_two_destinations_are_refused_and_nothing_changes(our_client, operator):
    sync = ProviderSync(our_client)
    sync.sync(flat())
    x = str(uuid.uuid4())
    put_allocation(operator, x, {ROOT: {"VCPU": 2}})
    with pytest.raises(errors.ReshapeUnsupported, match="VCPU"):
        sync.sync(nested(NUMA0, NUMA1))
    assert allocations_of(operator, x) == {ROOT: {"VCPU": 2}}
    assert "VCPU" in get(operator, f"/resource_providers/{ROOT}/inventories")["inventories"]
