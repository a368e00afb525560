"""Table-driven tests of the pure ledger: no mocks, no I/O."""

import pytest

from rtagent.resources import PCPU
from rtagent.tracker import errors, ledger
from rtagent.tracker.model import DISK_GB, MEMORY_MB, VCPU, Flavor, Instance, frozen_map
from rtagent.virt.host import HostView

HOST = HostView("node1", "QEMU", 8002000, vcpus=16, memory_mb=32768, local_gb=500)


def policy(**kw):
    ratios = kw.pop("ratios", {})
    return ledger.ResourcePolicy(ratios=frozen_map(ratios), **kw)


def instance(uuid, vcpus, mem, disk):
    return Instance(
        uuid, Flavor(vcpus, mem, disk), frozen_map({VCPU: vcpus, MEMORY_MB: mem, DISK_GB: disk})
    )


@pytest.mark.parametrize(
    "pol, placement, expected",
    [
        # nova defaults: initial ratios 4.0 / 1.0 / 1.0, 512 MiB reserved
        (policy(), {}, {VCPU: (16, 0, 4.0), MEMORY_MB: (32768, 512, 1.0), DISK_GB: (500, 0, 1.0)}),
        # configured ratios win over Placement's
        (
            policy(ratios={VCPU: 16.0, MEMORY_MB: 1.5}),
            {VCPU: 2.0, MEMORY_MB: 1.0},
            {VCPU: (16, 0, 16.0), MEMORY_MB: (32768, 512, 1.5), DISK_GB: (500, 0, 1.0)},
        ),
        # unset ratios take Placement's (an operator set them via the API)
        (
            policy(),
            {VCPU: 2.0, DISK_GB: 0.9},
            {VCPU: (16, 0, 2.0), MEMORY_MB: (32768, 512, 1.0), DISK_GB: (500, 0, 0.9)},
        ),
        # reserved disk rounds up to whole GiB; reserved cpus as-is
        (
            policy(reserved_host_disk_mb=1025, reserved_host_cpus=2, reserved_host_memory_mb=0),
            {},
            {VCPU: (16, 2, 4.0), MEMORY_MB: (32768, 0, 1.0), DISK_GB: (500, 2, 1.0)},
        ),
        # a reservation above the total is clamped, not sent (Placement refuses it)
        (
            policy(reserved_host_memory_mb=99999),
            {},
            {VCPU: (16, 0, 4.0), MEMORY_MB: (32768, 32768, 1.0), DISK_GB: (500, 0, 1.0)},
        ),
    ],
)
def test_inventories(pol, placement, expected):
    invs = ledger.inventories(HOST, pol, placement)
    assert {rc: (i.total, i.reserved, i.allocation_ratio) for rc, i in invs.items()} == expected
    for rc, inv in invs.items():
        assert (inv.min_unit, inv.max_unit, inv.step_size) == (1, inv.total, 1), rc


def test_inventories_unresolved_leave_unset_ratios_none():
    invs = ledger.inventories(HOST, policy(ratios={VCPU: 2.0}), resolve_ratios=False)
    assert invs[VCPU].allocation_ratio == 2.0
    assert invs[MEMORY_MB].allocation_ratio is None


def cpu_host(shared=None, dedicated=None):
    """An 8-CPU host (CPUs 0-7 online) with the given CPU sets."""
    return HostView(
        "n",
        "QEMU",
        1,
        vcpus=8,
        memory_mb=1024,
        local_gb=10,
        cpu_shared_set=frozenset(shared) if shared is not None else None,
        cpu_dedicated_set=frozenset(dedicated) if dedicated is not None else None,
    )


@pytest.mark.parametrize(
    ("host", "pol", "placement", "expected"),
    [
        # neither set: VCPU is every online CPU, with the usual rules; no PCPU
        (cpu_host(), policy(), {}, {VCPU: (8, 0, 4.0)}),
        (cpu_host(), policy(reserved_host_cpus=2), {}, {VCPU: (8, 2, 4.0)}),
        # dedicated only: PCPU, and no VCPU at all (nova's libvirt driver)
        (cpu_host(dedicated={4, 5, 6, 7}), policy(), {}, {PCPU: (4, 0, 1.0)}),
        # shared only: VCPU is the shared set, with the configured ratio
        (cpu_host(shared={0, 1}), policy(ratios={VCPU: 16.0}), {}, {VCPU: (2, 0, 16.0)}),
        # both: each its own; the host's CPUs outside them count for neither
        (
            cpu_host(shared={0, 1, 2}, dedicated={4, 5}),
            policy(ratios={VCPU: 2.0}),
            {},
            {VCPU: (3, 0, 2.0), PCPU: (2, 0, 1.0)},
        ),
        # PCPU's ratio is 1.0 whatever the configuration or Placement say;
        # VCPU takes Placement's when none is configured
        (
            cpu_host(shared={0}, dedicated={1, 2}),
            policy(ratios={PCPU: 8.0}, initial_ratios={VCPU: 4.0, PCPU: 16.0}),
            {VCPU: 3.0, PCPU: 4.0},
            {VCPU: (1, 0, 3.0), PCPU: (2, 0, 1.0)},
        ),
    ],
)
def test_cpu_inventories(host, pol, placement, expected):
    invs = ledger.inventories(host, pol, placement)
    got = {rc: (i.total, i.reserved, i.allocation_ratio) for rc, i in invs.items()}
    assert {rc: v for rc, v in got.items() if rc in (VCPU, PCPU)} == expected
    for rc in (VCPU, PCPU):
        if rc in invs:
            assert (invs[rc].min_unit, invs[rc].max_unit, invs[rc].step_size) == (
                1,
                invs[rc].total,
                1,
            )


def test_pcpu_ratio_is_managed_in_the_desired_view_too():
    # resolve_ratios=False is what Placement is told: PCPU's 1.0 is pushed
    # (an operator's PCPU ratio is put back), VCPU's unset one is left alone.
    host = cpu_host(shared={0}, dedicated={1})
    invs = ledger.inventories(host, policy(ratios={PCPU: 8.0}), resolve_ratios=False)
    assert invs[PCPU].allocation_ratio == 1.0
    assert invs[VCPU].allocation_ratio is None


def test_zero_total_class_is_left_out():
    host = HostView("n", "QEMU", 1, vcpus=4, memory_mb=1024, local_gb=0)
    assert DISK_GB not in ledger.inventories(host, policy())


@pytest.mark.parametrize(
    "flavor, volume_backed, expected",
    [
        (Flavor(2, 2048, 20), False, {VCPU: 2, MEMORY_MB: 2048, DISK_GB: 20}),
        (Flavor(2, 2048, 20), True, {VCPU: 2, MEMORY_MB: 2048}),
        (
            Flavor(1, 512, 10, ephemeral_gb=5, swap_mb=1),
            False,
            {VCPU: 1, MEMORY_MB: 512, DISK_GB: 16},
        ),
        (Flavor(1, 512, 10, swap_mb=2048), True, {VCPU: 1, MEMORY_MB: 512, DISK_GB: 2}),
        (Flavor(1, 512, 0), False, {VCPU: 1, MEMORY_MB: 512}),
    ],
)
def test_requested_resources(flavor, volume_backed, expected):
    assert ledger.requested_resources(flavor, volume_backed) == expected


def test_usage_sums_instances():
    used = ledger.instance_usage([instance("a", 2, 100, 10), instance("b", 3, 200, 0)])
    assert used == {VCPU: 5, MEMORY_MB: 300, DISK_GB: 10}


INVS = ledger.inventories(HOST, policy())  # VCPU cap 64, MEM cap 32256, DISK cap 500


@pytest.mark.parametrize(
    "used, requested, limits, refused",
    [
        ({}, {VCPU: 16, MEMORY_MB: 32256, DISK_GB: 500}, {}, []),
        ({VCPU: 60}, {VCPU: 4}, {}, []),  # exactly at capacity fits
        ({VCPU: 61}, {VCPU: 4}, {}, [VCPU]),
        ({}, {MEMORY_MB: 32257}, {}, [MEMORY_MB]),  # reserved memory is not for guests
        ({}, {VCPU: 17}, {}, [VCPU]),  # above max_unit (one guest > host)
        ({DISK_GB: 499}, {DISK_GB: 2, VCPU: 99}, {}, [DISK_GB, VCPU]),  # every reason listed
        ({VCPU: 10}, {VCPU: 4}, {VCPU: 12}, [VCPU]),  # scheduler limit
        ({VCPU: 8}, {VCPU: 4}, {VCPU: 12}, []),
        # memory limits count the 512 MiB reservation as used, as nova does
        ({MEMORY_MB: 1000}, {MEMORY_MB: 500}, {MEMORY_MB: 2012}, []),
        ({MEMORY_MB: 1000}, {MEMORY_MB: 501}, {MEMORY_MB: 2012}, [MEMORY_MB]),
        ({}, {"CUSTOM_GPU": 1}, {}, ["CUSTOM_GPU"]),  # no such inventory
    ],
)
def test_refusals(used, requested, limits, refused):
    reasons = ledger.refusals(INVS, used, requested, limits)
    assert sorted({r.split(":")[0] for r in reasons}) == sorted(refused)


@pytest.mark.parametrize(
    "limits, expected",
    [
        (None, {}),
        ({"vcpu": 10, "memory_mb": 2048.5, "disk_gb": None}, {VCPU: 10, MEMORY_MB: 2048.5}),
        ({"numa_topology": {"cells": []}}, {}),  # NUMA claims: a later issue
    ],
)
def test_check_limits(limits, expected):
    assert ledger.check_limits(limits) == expected


@pytest.mark.parametrize(
    "limits",
    [
        {"vcpus": 1},
        {"vcpu": -1},
        {"vcpu": "8"},
        {"vcpu": True},
        {"memory_mb": float("nan")},  # would disable the check: NaN compares False
        {"disk_gb": float("inf")},
    ],
)
def test_check_limits_rejects(limits):
    with pytest.raises(errors.InvalidClaimRequest):
        ledger.check_limits(limits)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(vcpus=0, memory_mb=1),
        dict(vcpus=1, memory_mb=-1),
        dict(vcpus=1.5, memory_mb=1),
        dict(vcpus=1, memory_mb=1, root_gb="1"),
        dict(vcpus=True, memory_mb=1),
    ],
)
def test_flavor_rejects_bad_sizes(kwargs):
    with pytest.raises(errors.InvalidClaimRequest):
        Flavor(**kwargs)
