"""What a virt driver's own provider tree asks of the sync, against the
real Placement app: aggregates managed like traits, a sharing provider
beside the node's root, and a reshape whose allocations the driver moved
(nova's ``update_provider_tree`` with ``ReshapeNeeded``)."""

import uuid

import pytest

from rtagent.placement.client import PlacementClient
from rtagent.placement.sync import ProviderSync
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map
from tests.functional.placement.conftest import allocations_of, get, put_allocation

pytestmark = pytest.mark.functional

ROOT = "bbbbbbbb-0000-4000-8000-000000000001"
NUMA0 = "bbbbbbbb-0000-4000-8000-000000000002"
NUMA1 = "bbbbbbbb-0000-4000-8000-000000000003"
SHARED = "bbbbbbbb-0000-4000-8000-000000000004"
AGG_A = "cccccccc-0000-4000-8000-00000000000a"
AGG_B = "cccccccc-0000-4000-8000-00000000000b"
AGG_NOVA = "cccccccc-0000-4000-8000-00000000000c"
MANAGED = frozenset({"VCPU", "MEMORY_MB"})


def invs(**totals):
    return frozen_map({rc: Inventory(total=t, max_unit=t) for rc, t in totals.items()})


def root(**fields):
    base = Provider(
        ROOT,
        "host-d",
        inventories=invs(VCPU=8, MEMORY_MB=4096),
        managed_classes=MANAGED,
    )
    return base.replace(**fields)


def aggregates_of(adapter, rp):
    return set(get(adapter, f"/resource_providers/{rp}/aggregates")["aggregates"])


def set_aggregates(adapter, rp, aggregates):
    gen = get(adapter, f"/resource_providers/{rp}")["generation"]
    resp = adapter.put(
        f"/resource_providers/{rp}/aggregates",
        json={"resource_provider_generation": gen, "aggregates": sorted(aggregates)},
    )
    assert resp.status_code == 200, resp.text


@pytest.fixture
def our_client(service_adapter, recorder):
    return PlacementClient(service_adapter, recorder)


def test_the_drivers_aggregates_are_managed_and_others_are_kept(client, operator, recorder):
    sync = ProviderSync(client)
    # Not managed: aggregates are neither read nor written.
    sync.sync(ProviderTree([root()]))
    assert not [u for _, u, _ in recorder.requests if u.endswith("/aggregates")]
    # nova-api mirrors a host aggregate onto the node's root.
    set_aggregates(operator, ROOT, {AGG_NOVA})

    reported = root(aggregates=frozenset({AGG_A, AGG_B}), managed_aggregates=frozenset({AGG_A}))
    sync.sync(ProviderTree([reported]))
    assert aggregates_of(operator, ROOT) == {AGG_A, AGG_B, AGG_NOVA}

    # Unchanged: the listing alone, aggregates cached with the provider.
    recorder.reset()
    assert sync.sync(ProviderTree([reported])).operations == ()
    assert recorder.count() == 1

    # The driver stops reporting B: B leaves, nova-api's aggregate stays.
    dropped = root(aggregates=frozenset({AGG_A}), managed_aggregates=frozenset({AGG_A, AGG_B}))
    result = sync.sync(ProviderTree([dropped]))
    assert [type(op).__name__ for op in result.operations] == ["SetAggregates"]
    assert aggregates_of(operator, ROOT) == {AGG_A, AGG_NOVA}


def test_a_sharing_provider_beside_the_root_is_published_and_never_deleted(
    client, operator, recorder
):
    sync = ProviderSync(client)
    shared = Provider(
        SHARED,
        "shared-storage",
        inventories=invs(DISK_GB=500),
        traits=frozenset({"MISC_SHARES_VIA_AGGREGATE"}),
        managed_traits=frozenset({"MISC_SHARES_VIA_AGGREGATE"}),
        managed_classes=frozenset({"DISK_GB"}),
        aggregates=frozenset({AGG_A}),
        managed_aggregates=frozenset({AGG_A}),
        sharing=True,
    )
    node = root(aggregates=frozenset({AGG_A}), managed_aggregates=frozenset({AGG_A}))
    sync.sync(ProviderTree([node, shared]))

    listed = get(operator, f"/resource_providers/{SHARED}")
    assert listed["root_provider_uuid"] == SHARED
    assert (
        get(operator, f"/resource_providers/{SHARED}/inventories")["inventories"]["DISK_GB"][
            "total"
        ]
        == 500
    )
    assert get(operator, f"/resource_providers/{SHARED}/traits")["traits"] == [
        "MISC_SHARES_VIA_AGGREGATE"
    ]
    assert aggregates_of(operator, SHARED) == aggregates_of(operator, ROOT) == {AGG_A}

    # Steady: one listing per tree.
    recorder.reset()
    assert sync.sync(ProviderTree([node, shared])).operations == ()
    assert recorder.count() == 2

    # No longer reported by this host: left to the others that share it.
    sync.sync(ProviderTree([node]))
    assert get(operator, f"/resource_providers/{SHARED}")["uuid"] == SHARED


def test_a_reshape_the_driver_made_is_written_with_its_tree_in_one_request(
    our_client, operator, recorder
):
    sync = ProviderSync(our_client, sleep=lambda s: None)
    sync.sync(ProviderTree([root()]))
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    put_allocation(operator, x, {ROOT: {"VCPU": 2, "MEMORY_MB": 512}})
    put_allocation(operator, y, {ROOT: {"VCPU": 1}}, consumer_type="MIGRATION")
    read = {c: get(operator, f"/allocations/{c}") for c in (x, y)}

    # The driver empties the root and splits VCPU over two NUMA children,
    # which the agent's own rule (one destination per class) cannot infer.
    numa = [
        Provider(
            uuid_,
            f"host-d_numa{i}",
            parent_uuid=ROOT,
            inventories=invs(VCPU=4, MEMORY_MB=2048),
            managed_classes=MANAGED,
        )
        for i, uuid_ in enumerate((NUMA0, NUMA1))
    ]
    moved = {
        x: dict(
            read[x],
            allocations={
                NUMA0: {"resources": {"VCPU": 2}},
                NUMA1: {"resources": {"MEMORY_MB": 512}},
            },
        ),
        y: dict(read[y], allocations={NUMA1: {"resources": {"VCPU": 1}}}),
    }
    tree = ProviderTree([root(inventories=invs()), *numa])
    recorder.reset()
    result = sync.sync(tree, driver_allocations=moved)

    assert [u for m, u, _ in recorder.requests if m == "POST"][-1] == "/reshaper"
    assert result.seeded == tuple(sorted((x, y)))
    assert allocations_of(operator, x) == {NUMA0: {"VCPU": 2}, NUMA1: {"MEMORY_MB": 512}}
    assert allocations_of(operator, y) == {NUMA1: {"VCPU": 1}}
    assert get(operator, f"/allocations/{y}")["consumer_type"] == "MIGRATION"
    assert get(operator, f"/resource_providers/{ROOT}/inventories")["inventories"] == {}
    # The same tree again, without the driver's allocations: nothing to do.
    assert sync.sync(tree).operations == ()
