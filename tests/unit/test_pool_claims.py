"""Claims on a host whose DISK_GB is a pool shared with other hosts: checked
as Placement checks the pool's provider (its capacity, every host's
allocations on it), while the root keeps no DISK_GB. Real tracker and
store, host views built by hand."""

import dataclasses
import uuid

import pytest

from rtagent.placement import desired, reshape
from rtagent.placement import diff as diffmod
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import DISK_GB, Inventory, frozen_map
from rtagent.tracker import errors
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor
from rtagent.tracker.pooldisk import PoolUsage
from rtagent.virt.host import DiskPool
from tests.unit.helpers import HOST, make_tracker

POOL = DiskPool(
    pool="vms",
    shared=True,
    provider_uuid="9d0b3b6e-0000-5000-8000-000000000001",
    provider_name="ceph_pool:vms@fsid",
    aggregate_uuid="9d0b3b6e-0000-5000-8000-000000000002",
    total_gb=100,
    used_gb=3,
)
SHARED = dataclasses.replace(HOST, local_gb=100, disk_pool=POOL)


def tracker(tmp_path, host=SHARED, ratio=None):
    policy = ResourcePolicy(
        reserved_host_memory_mb=0,
        reserved_host_disk_mb=4096,
        ratios=frozen_map({DISK_GB: ratio}) if ratio else frozen_map({}),
    )
    t, _ = make_tracker(tmp_path / "state", policy=policy)
    t.update_host(host)
    return t


def claim(t, disk_gb):
    return t.instance_claim(str(uuid.uuid4()), Flavor(1, 64, disk_gb))


def test_claims_count_other_hosts_allocations_on_the_pool(tmp_path):
    t = tracker(tmp_path)
    claim(t, 30)
    t.set_pool_usage(PoolUsage(others_gb=50, allocation_ratio=1.0))
    # 100 GiB, nothing reserved on the pool (reserved_host_disk_mb is a
    # host's disk), 30 here, 50 elsewhere: 20 left, as in Placement.
    with pytest.raises(errors.ComputeResourcesUnavailable, match="free 20 of capacity 100"):
        claim(t, 21)
    claim(t, 20)


def test_the_pool_ratio_applies_to_every_host_usage(tmp_path):
    t = tracker(tmp_path)
    t.set_pool_usage(PoolUsage(others_gb=150, allocation_ratio=2.0))
    with pytest.raises(errors.ComputeResourcesUnavailable, match="free 50 of capacity 200"):
        claim(t, 51)


def test_a_host_on_its_own_disk_ignores_the_pool_usage(tmp_path):
    t = tracker(tmp_path, host=HOST)
    t.set_pool_usage(PoolUsage(others_gb=99))
    claim(t, 96)  # 100 GiB less the 4 reserved


def test_the_root_has_no_disk_and_the_pool_one_provider(tmp_path):
    t = tracker(tmp_path)
    tree = desired.desired_tree(t.snapshot())
    root = tree.get(t.node_uuid)
    assert DISK_GB not in root.inventories
    assert POOL.aggregate_uuid in root.aggregates
    pool = tree.get(POOL.provider_uuid)
    assert pool.sharing and pool.parent_uuid is None
    assert pool.traits == {"MISC_SHARES_VIA_AGGREGATE"}
    assert pool.aggregates == {POOL.aggregate_uuid}
    inv = pool.inventories[DISK_GB]
    assert (inv.total, inv.reserved, inv.max_unit) == (100, 0, 100)


def test_nova_layout_leaves_the_pool_aggregate(tmp_path):
    t = tracker(
        tmp_path,
        host=dataclasses.replace(SHARED, disk_pool=dataclasses.replace(POOL, shared=False)),
    )
    tree = desired.desired_tree(t.snapshot())
    root = tree.get(t.node_uuid)
    assert root.inventories[DISK_GB].total == 100
    assert POOL.aggregate_uuid not in root.aggregates
    assert POOL.aggregate_uuid in root.managed_aggregates
    assert POOL.provider_uuid not in tree


def _disk(total):
    return frozen_map(
        {DISK_GB: Inventory(total=total, reserved=0, min_unit=1, max_unit=total, step_size=1)}
    )


@pytest.mark.parametrize("pool_exists", [False, True], ids=["first-host", "joining-host"])
def test_disk_moves_from_the_root_to_the_pool(pool_exists):
    root = Provider(uuid="root", name="cmp", inventories=_disk(50))
    pool = Provider(uuid="pool", name="p", inventories=_disk(100), sharing=True)
    view = ProviderTree([root] + ([pool.replace(generation=3)] if pool_exists else []))
    wanted = ProviderTree([root.replace(inventories=frozen_map({})), pool])
    ops = [diffmod.SetInventories("root", frozen_map({}))]
    if not pool_exists:
        ops.append(diffmod.SetInventories("pool", pool.inventories))
    assert reshape.moves(wanted, view, ops) == [reshape.Move(DISK_GB, "root", "pool")]
