"""Untracked domains' usage as ``reserved`` in the desired tree, and the
agent's own check agreeing with the capacity Placement computes from it."""

import dataclasses
import uuid

import pytest

from rtagent.placement.desired import root_provider
from rtagent.resources import DISK_GB, MEMORY_MB, VCPU, Inventory
from rtagent.tracker import errors, untracked
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor
from rtagent.virt.host import DOMAIN_PAUSED, DOMAIN_RUNNING, DOMAIN_SHUTOFF, DomainInfo
from tests.unit.helpers import HOST, make_tracker


def domain(vcpus, memory_mb, state=DOMAIN_RUNNING):
    return DomainInfo(str(uuid.uuid4()), "by-hand", state, vcpus, memory_mb)


def inv(total, reserved=0, ratio=1.0):
    return Inventory(total=total, reserved=reserved, max_unit=total, allocation_ratio=ratio)


@pytest.mark.parametrize(
    ("usage", "ratio", "units"),
    [
        (0, 4.0, None),  # nothing to reserve: the class is left out
        (1, 4.0, 1),  # a part of a CPU is a whole CPU
        (4, 4.0, 1),
        (5, 4.0, 2),
        (6, 4.0, 2),
        (6, 1.0, 6),
        (3, 1.5, 2),
        (11, 1.1, 10),  # 11 / 1.1 is 10.000000000000002 in floats
        (12, 1.1, 11),
        (1000, 0.5, 2000),  # a ratio below 1 reserves more than used
    ],
)
def test_reservation_is_usage_over_ratio_rounded_up(usage, ratio, units):
    got = untracked.reservation({VCPU: inv(64, ratio=ratio)}, {VCPU: usage})
    assert got.get(VCPU) == units


def test_add_reserved_clamps_to_the_total_and_leaves_others_alone():
    invs = {VCPU: inv(4, reserved=1, ratio=4.0), MEMORY_MB: inv(1000, reserved=100)}
    got = untracked.add_reserved(invs, {VCPU: 9, MEMORY_MB: 200, DISK_GB: 5})
    assert got[VCPU].reserved == 4  # not 10: Placement refuses reserved > total
    assert got[MEMORY_MB].reserved == 300
    assert DISK_GB not in got  # no inventory, nothing invented
    assert invs[VCPU].reserved == 1  # a copy


def snapshot_with(tmp_path, domains, policy=None, **kwargs):
    tracker, store = make_tracker(tmp_path, policy, **kwargs)
    snap = tracker.update_host(dataclasses.replace(HOST, domains=tuple(domains)))
    return tracker, store, snap


def reserved_of(snap):
    return {rc: i.reserved for rc, i in root_provider(snap).inventories.items()}


def test_running_and_paused_untracked_domains_are_reserved(tmp_path):
    # HOST: 4 CPUs at ratio 4.0, 4096 MiB, 100 GiB; nothing reserved.
    doms = [domain(2, 1000), domain(1, 500, DOMAIN_PAUSED), domain(8, 2000, DOMAIN_SHUTOFF)]
    _, store, snap = snapshot_with(tmp_path, doms)
    # 3 vCPUs / 4.0 -> 1 CPU; 1500 MiB; disk is not counted for domains.
    assert reserved_of(snap) == {VCPU: 1, MEMORY_MB: 1500, DISK_GB: 0}
    store.close()


def test_configured_reservations_add_up_and_stay_within_the_total(tmp_path):
    policy = ResourcePolicy(reserved_host_cpus=1, reserved_host_memory_mb=512)
    _, store, snap = snapshot_with(tmp_path, [domain(64, 8000)], policy)
    assert reserved_of(snap) == {VCPU: 4, MEMORY_MB: 4096, DISK_GB: 0}
    store.close()


def test_the_option_off_or_uncounted_domains_reserve_nothing(tmp_path):
    policy = ResourcePolicy(reserved_host_memory_mb=512, reserve_untracked=False)
    tracker, store, snap = snapshot_with(tmp_path / "off", [domain(2, 1000)], policy)
    assert reserved_of(snap) == {VCPU: 0, MEMORY_MB: 512, DISK_GB: 0}
    # counted as used by the agent alone, as before: 16 - 2 vCPUs free
    tracker.instance_claim(str(uuid.uuid4()), Flavor(4, 64))
    tracker.instance_claim(str(uuid.uuid4()), Flavor(4, 64))
    tracker.instance_claim(str(uuid.uuid4()), Flavor(4, 64))
    tracker.instance_claim(str(uuid.uuid4()), Flavor(2, 64))
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 64))
    store.close()

    _, store, snap = snapshot_with(tmp_path / "uncounted", [domain(2, 1000)], count_untracked=False)
    assert reserved_of(snap) == {VCPU: 0, MEMORY_MB: 0, DISK_GB: 0}
    store.close()


def test_the_reservation_follows_the_ratio_claims_are_checked_with(tmp_path):
    tracker, store, snap = snapshot_with(tmp_path, [domain(6, 0)])
    assert reserved_of(snap)[VCPU] == 2  # initial ratio 4.0
    tracker.set_placement_ratios({VCPU: 2.0})  # an operator set it in Placement
    assert reserved_of(tracker.snapshot())[VCPU] == 3
    store.close()


def placement_allows(provider, claimed, requested):
    """Placement's own test: (total - reserved) x ratio - used >= requested,
    within max_unit."""
    for rc, amount in requested.items():
        i = provider.inventories[rc]
        if amount > i.max_unit or claimed.get(rc, 0) + amount > i.capacity:
            return False
    return True


@pytest.mark.parametrize(
    ("cpus", "ratio", "reserved_cpus", "untracked_vcpus"),
    [(4, 4.0, 0, 2), (4, 4.0, 1, 5), (4, 1.0, 0, 3), (4, 1.5, 0, 2), (4, 4.0, 0, 40)],
)
def test_the_agent_accepts_exactly_what_placement_would(
    tmp_path, cpus, ratio, reserved_cpus, untracked_vcpus
):
    """Fill the node one vCPU at a time: each claim the agent takes is one
    Placement has room for (allocations equal to claims), and the claim
    the agent refuses is one Placement has no room for either."""
    policy = ResourcePolicy(
        reserved_host_cpus=reserved_cpus,
        reserved_host_memory_mb=0,
        ratios={VCPU: ratio},
    )
    host = dataclasses.replace(HOST, vcpus=cpus, domains=(domain(untracked_vcpus, 0),))
    tracker, store = make_tracker(tmp_path, policy)
    tracker.update_host(host)
    claimed = 0
    for _ in range(64):
        provider = root_provider(tracker.snapshot())
        allowed = placement_allows(provider, {VCPU: claimed}, {VCPU: 1})
        try:
            tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 1))
        except errors.ComputeResourcesUnavailable:
            assert not allowed
            break
        assert allowed
        claimed += 1
    else:
        pytest.fail("the node never filled up")
    units = -(-untracked_vcpus // ratio)
    assert claimed == max(0, int((cpus - reserved_cpus - units) * ratio))
    store.close()
