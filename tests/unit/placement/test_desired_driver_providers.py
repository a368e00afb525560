"""Providers a host driver reports (nova's ``update_provider_tree``) in the
desired tree: extra classes and traits on the root, children as the
driver's, the agent's own classes left the agent's."""

import dataclasses

import pytest

from rtagent.placement.desired import desired_tree, driver_providers
from rtagent.placement.tree import Provider
from rtagent.resources import DISK_GB, MEMORY_MB, PCPU, VCPU, Inventory, frozen_map
from rtagent.virt.host import ProviderFacts
from tests.unit.helpers import HOST, make_tracker

ROOT = "5b2b6f7e-0000-4000-8000-000000000001"
CHILD = "5b2b6f7e-0000-4000-8000-000000000002"


def record(total, **more):
    return tuple(sorted({"total": total, "max_unit": total, **more}.items()))


def root(**changes):
    base = Provider(
        uuid=ROOT,
        name="node",
        inventories=frozen_map({VCPU: Inventory(total=8, max_unit=8, allocation_ratio=4.0)}),
        traits=frozenset({"COMPUTE_NODE"}),
        managed_traits=frozenset({"COMPUTE_NODE"}),
        managed_classes=frozenset({VCPU, MEMORY_MB, DISK_GB}),
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("reported", "classes", "traits", "children"),
    [
        ((), {VCPU}, {"COMPUTE_NODE"}, 0),
        # the driver's figure for a class the agent derives is ignored
        (
            (ProviderFacts(ROOT, "node", None, ((VCPU, record(1000)),)),),
            {VCPU},
            {"COMPUTE_NODE"},
            0,
        ),
        (
            (
                ProviderFacts(
                    ROOT, "node", None, (("CUSTOM_MAGIC", record(5)),), frozenset({"CUSTOM_X"})
                ),
            ),
            {VCPU, "CUSTOM_MAGIC"},
            {"COMPUTE_NODE", "CUSTOM_X"},
            0,
        ),
        (
            (
                ProviderFacts(ROOT, "node"),
                ProviderFacts(CHILD, "node-child", ROOT, (("CUSTOM_MAGIC", record(2)),)),
            ),
            {VCPU},
            {"COMPUTE_NODE"},
            1,
        ),
    ],
)
def test_driver_providers(reported, classes, traits, children):
    got_root, got_children = driver_providers(root(), reported)
    assert set(got_root.inventories) == classes
    assert got_root.traits == traits
    assert got_root.inventories[VCPU].total == 8
    assert len(got_children) == children
    # what the driver adds is managed: a class or trait it stops reporting goes
    assert set(got_root.managed_classes) >= classes
    assert got_root.managed_traits >= traits


def test_a_child_is_the_drivers_to_manage():
    reported = (
        ProviderFacts(
            CHILD,
            "node-child",
            ROOT,
            (("CUSTOM_MAGIC", record(2, reserved=1)),),
            frozenset({"CUSTOM_T"}),
        ),
    )
    _, (child,) = driver_providers(root(), reported)
    assert child.parent_uuid == ROOT
    assert child.inventories["CUSTOM_MAGIC"] == Inventory(total=2, reserved=1, max_unit=2)
    assert child.managed_classes == {"CUSTOM_MAGIC"}
    assert child.managed_traits == child.traits == {"CUSTOM_T"}


def test_the_desired_tree_carries_the_host_views_providers(tmp_path):
    tracker, _store = make_tracker(tmp_path)
    view = dataclasses.replace(
        HOST,
        providers=(
            ProviderFacts(CHILD, "child", tracker.node_uuid, (("CUSTOM_MAGIC", record(3)),)),
        ),
    )
    snap = tracker.update_host(view)
    tree = desired_tree(snap)
    assert tree.get(CHILD).parent_uuid == tracker.node_uuid
    assert next(p.uuid for p in tree) == tracker.node_uuid  # parents first


def pcpu_reported(total):
    return (ProviderFacts(ROOT, "node", None, ((PCPU, record(total, allocation_ratio=1.0)),)),)


def test_a_drivers_pcpu_stands_while_the_agent_derives_none():
    # nova's virt drivers report PCPU themselves (rtagent.nova), with no CPU
    # sets in the host view; the agent's root has no PCPU then.
    got, _ = driver_providers(root(), pcpu_reported(6))
    assert got.inventories[PCPU].total == 6
    assert PCPU in got.managed_classes


def test_the_agents_pcpu_wins_over_a_drivers():
    pcpu = Inventory(total=2, max_unit=2, allocation_ratio=1.0)
    agents = root(inventories=frozen_map({**root().inventories, PCPU: pcpu}))
    got, _ = driver_providers(agents, pcpu_reported(6))
    assert got.inventories[PCPU] == pcpu


@pytest.mark.parametrize(
    ("dedicated", "expected"),
    [(None, {VCPU, MEMORY_MB, DISK_GB}), (frozenset({1, 2}), {PCPU, MEMORY_MB, DISK_GB})],
)
def test_the_root_manages_pcpu_with_or_without_a_dedicated_set(tmp_path, dedicated, expected):
    # Managed either way: PCPU leaves Placement when cpu_dedicated_set is unset.
    tracker, _store = make_tracker(tmp_path)
    snap = tracker.update_host(dataclasses.replace(HOST, cpu_dedicated_set=dedicated))
    (got,) = desired_tree(snap)
    assert set(got.inventories) == expected
    assert got.managed_classes == {VCPU, PCPU, MEMORY_MB, DISK_GB}


def seeded(**records):
    return tuple(sorted((rc, rec) for rc, rec in records.items()))


# The agent's figures as handed to the driver: VCPU 8 at Placement's ratio.
SEED = seeded(VCPU=record(8, allocation_ratio=4.0), MEMORY_MB=record(4096))


def test_a_root_record_the_driver_left_as_handed_stays_the_agents():
    reported = (ProviderFacts(ROOT, "node", None, SEED, seeded=SEED),)
    got, _ = driver_providers(root(inventories=frozen_map(_agent())), reported)
    # The agent's own record: its ratio None (Placement's stands) is kept.
    assert got.inventories[VCPU].allocation_ratio is None
    assert set(got.inventories) == {VCPU, MEMORY_MB}


def test_a_root_record_the_driver_changed_or_removed_is_the_drivers():
    changed = seeded(VCPU=record(8, allocation_ratio=10.0, max_unit=2))
    reported = (ProviderFacts(ROOT, "node", None, changed, seeded=SEED),)
    got, _ = driver_providers(root(inventories=frozen_map(_agent())), reported)
    assert got.inventories[VCPU] == Inventory(total=8, max_unit=2, allocation_ratio=10.0)
    # MEMORY_MB was handed and not returned: removed, and managed so it goes.
    assert MEMORY_MB not in got.inventories
    assert MEMORY_MB in got.managed_classes


def test_aggregates_are_managed_only_once_the_driver_reports_some():
    got, _ = driver_providers(root(), (ProviderFacts(ROOT, "node"),))
    assert got.aggregates is None
    reported = (
        ProviderFacts(
            ROOT,
            "node",
            aggregates=frozenset({"a"}),
            managed_aggregates=frozenset({"a", "b"}),
        ),
        ProviderFacts("ssp", "shared", None, (("DISK_GB", record(500)),)),
    )
    got, others = driver_providers(root(), reported)
    assert (got.aggregates, got.managed_aggregates) == (frozenset({"a"}), frozenset({"a", "b"}))
    # A root beside the node's is a sharing provider of the desired tree.
    assert [(p.uuid, p.sharing, p.parent_uuid) for p in others] == [("ssp", True, None)]


def _agent():
    return {
        VCPU: Inventory(total=8, max_unit=8, allocation_ratio=None),
        MEMORY_MB: Inventory(total=4096, max_unit=4096),
    }
