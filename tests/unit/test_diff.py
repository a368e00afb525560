"""The pure provider-tree diff: ownership of traits and ratios."""

from rtagent.placement import diff
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.tracker.model import MEMORY_MB, VCPU, Inventory, frozen_map

ROOT = "11111111-1111-1111-1111-111111111111"
CHILD = "22222222-2222-2222-2222-222222222222"


def want(traits=("COMPUTE_NODE",), managed=("COMPUTE_NODE",), vcpu_ratio=None, name="node1"):
    return Provider(
        uuid=ROOT,
        name=name,
        inventories=frozen_map(
            {
                VCPU: Inventory(16, 0, 1, 16, 1, vcpu_ratio),
                MEMORY_MB: Inventory(4096, 512, 1, 4096, 1, 1.0),
            }
        ),
        traits=frozenset(traits),
        managed_traits=frozenset(managed) | frozenset(traits),
        managed_classes=frozenset({VCPU, MEMORY_MB, "DISK_GB"}),
        ratio_defaults=frozen_map({VCPU: 4.0}),
    )


def seen(traits=("COMPUTE_NODE",), vcpu_ratio=4.0, name="node1", generation=3):
    return Provider(
        uuid=ROOT,
        name=name,
        generation=generation,
        inventories=frozen_map(
            {
                VCPU: Inventory(16, 0, 1, 16, 1, vcpu_ratio),
                MEMORY_MB: Inventory(4096, 512, 1, 4096, 1, 1.0),
            }
        ),
        traits=frozenset(traits),
    )


def ops_of(desired, view):
    return diff.diff(ProviderTree(desired), ProviderTree(view))


def test_new_provider_is_created_with_initial_ratio():
    ops = ops_of([want()], [])
    # traits before inventories: a refused inventory write cannot hold them back
    assert [type(o) for o in ops] == [diff.CreateProvider, diff.SetTraits, diff.SetInventories]
    assert ops[2].inventories[VCPU]["allocation_ratio"] == 4.0
    assert ops[1].traits == {"COMPUTE_NODE"}


def test_equal_trees_need_nothing():
    assert ops_of([want()], [seen()]) == []


def test_unmanaged_ratio_keeps_placement_value():
    # the operator set 2.0 through the API and nothing is configured
    assert ops_of([want(vcpu_ratio=None)], [seen(vcpu_ratio=2.0)]) == []


def test_configured_ratio_overrides_placement_value():
    ops = ops_of([want(vcpu_ratio=8.0)], [seen(vcpu_ratio=2.0)])
    assert [type(o) for o in ops] == [diff.SetInventories]
    assert ops[0].inventories[VCPU]["allocation_ratio"] == 8.0


def test_foreign_traits_survive_and_owned_ones_are_removed():
    desired = want(traits=("COMPUTE_NODE",), managed=("COMPUTE_NODE", "COMPUTE_STATUS_DISABLED"))
    current = seen(traits=("COMPUTE_NODE", "COMPUTE_STATUS_DISABLED", "CUSTOM_OPERATOR"))
    (op,) = ops_of([desired], [current])
    assert op == diff.SetTraits(ROOT, frozenset({"COMPUTE_NODE", "CUSTOM_OPERATOR"}))


def test_missing_owned_trait_is_added_back_without_dropping_others():
    (op,) = ops_of([want()], [seen(traits=("CUSTOM_RACK1",))])
    assert op.traits == {"COMPUTE_NODE", "CUSTOM_RACK1"}


def test_rename_keeps_uuid():
    (op,) = ops_of([want(name="node1.example.org")], [seen(name="node1")])
    assert op == diff.UpdateProvider(ROOT, "node1.example.org", None)


def test_parents_come_before_children():
    child = Provider(uuid=CHILD, name="node1_pci", parent_uuid=ROOT)
    # the child sorts first by UUID order if parents were not honoured
    tree = ProviderTree(
        [
            Provider(uuid="ffffffff-0000-0000-0000-000000000000", name="r"),
            Provider(
                uuid="00000000-0000-0000-0000-000000000001",
                name="c",
                parent_uuid="ffffffff-0000-0000-0000-000000000000",
            ),
        ]
    )
    assert [p.name for p in tree] == ["r", "c"]
    ops = ops_of([want(), child], [])
    creates = [o.uuid for o in ops if isinstance(o, diff.CreateProvider)]
    assert creates == [ROOT, CHILD]


def test_providers_not_desired_are_left_alone():
    foreign = Provider(uuid=CHILD, name="someone-elses", parent_uuid=ROOT, generation=1)
    assert ops_of([want()], [seen(), foreign]) == []


def test_foreign_inventory_is_carried_over():
    current = seen()
    gold = Inventory(5, 0, 1, 5, 1, 1.0)
    current = current.replace(inventories=frozen_map({**current.inventories, "CUSTOM_GOLD": gold}))
    assert ops_of([want()], [current]) == []
    # and when we must write, the foreign class is part of the full set
    (op,) = ops_of([want(vcpu_ratio=8.0)], [current])
    assert op.inventories["CUSTOM_GOLD"]["total"] == 5
    assert op.inventories[VCPU]["allocation_ratio"] == 8.0


def test_managed_class_that_is_no_longer_desired_is_removed():
    current = seen()
    current = current.replace(
        inventories=frozen_map({**current.inventories, "DISK_GB": Inventory(10, 0, 1, 10, 1, 1.0)})
    )
    (op,) = ops_of([want()], [current])
    assert set(op.inventories) == {VCPU, MEMORY_MB}


def test_a_sticky_reserved_is_never_lowered_by_us_but_may_rise():
    def child(reserved, sticky=True, generation=None):
        return Provider(
            uuid=CHILD,
            name="node1_0000:AF:00.0",
            parent_uuid=ROOT,
            generation=generation,
            inventories=frozen_map({"CUSTOM_T4": Inventory(1, reserved, 1, 1, 1, 1.0)}),
            managed_classes=frozenset({"CUSTOM_T4"}),
            sticky_reserved=frozenset({"CUSTOM_T4"}) if sticky else frozenset(),
        )

    def reserved_written(desired, current):
        ops = diff.diff(ProviderTree([desired]), ProviderTree([current]))
        return [op.inventories["CUSTOM_T4"]["reserved"] for op in ops]

    assert reserved_written(child(0), child(1, generation=4)) == []  # kept at 1
    assert reserved_written(child(0, sticky=False), child(1, generation=4)) == [0]
    assert reserved_written(child(1), child(0, generation=4)) == [1]


def test_an_owned_provider_keeps_no_class_or_trait_the_agent_stopped_reporting():
    # A device spec changed from CUSTOM_PF / trait PF_WHITE to CUSTOM_PF2 /
    # PF_BLACK: nothing of the old ones stays on the device's provider.
    def child(rc, trait, owned=True, generation=None):
        return Provider(
            uuid=CHILD,
            name="node1_0000:81:00.0",
            parent_uuid=ROOT,
            generation=generation,
            inventories=frozen_map({rc: Inventory(1, 0, 1, 1, 1, 1.0)}),
            traits=frozenset({trait}),
            managed_traits=frozenset({trait}),
            managed_classes=frozenset({rc}),
            owned=owned,
        )

    current = child("CUSTOM_PF", "CUSTOM_PF_WHITE", generation=3)
    ops = diff.diff(ProviderTree([child("CUSTOM_PF2", "CUSTOM_PF_BLACK")]), ProviderTree([current]))
    written = {type(op).__name__: op for op in ops}
    assert set(written["SetInventories"].inventories) == {"CUSTOM_PF2"}
    assert written["SetTraits"].traits == frozenset({"CUSTOM_PF_BLACK"})
    # Not owned: what the agent does not manage is carried over.
    ops = diff.diff(
        ProviderTree([child("CUSTOM_PF2", "CUSTOM_PF_BLACK", owned=False)]),
        ProviderTree([current]),
    )
    written = {type(op).__name__: op for op in ops}
    assert set(written["SetInventories"].inventories) == {"CUSTOM_PF", "CUSTOM_PF2"}
    assert written["SetTraits"].traits == frozenset({"CUSTOM_PF_WHITE", "CUSTOM_PF_BLACK"})
