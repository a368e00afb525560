# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The PCI device state machine: every transition and every refusal
(including the PF/VF rules), discovery refreshes, and a property test that
random claims and frees never give a device two owners or free a PF whose
VF is held."""

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.pci import devices, errors, model
from rtagent.pci.devices import ALLOCATED, AVAILABLE, CLAIMED, UNAVAILABLE, UNCLAIMABLE
from tests.unit.pci.hosts import GPU, PF1, PF2, VF1A, VF1B, VF2A, VF2B, pf, sriov_pairs, vf

ORPHAN = "0000:83:02.0"

# The shared host (tests/unit/pci/hosts.py), a VF whose PF matched no
# device spec, and a plain PCI device.
SRIOV_HOST = (
    *sriov_pairs(),
    (vf(ORPHAN, "0000:83:00.0", 1), {}),
    (model.HostDevice(GPU, "10de", "1db4"), {"resource_class": "CUSTOM_GPU"}),
)


def fresh():
    return devices.refresh(devices.make_table(), SRIOV_HOST)


def run(table, ops):
    for op, *args in ops:
        if op == "claim":
            table = devices.claim(table, *args)
        elif op == "allocate":
            table = devices.allocate(table, *args)
        else:
            addresses, status = [*args[1:], None, None][:2]
            table = devices.free(table, args[0], addresses=addresses, status=status)
    return table


def states(table):
    return {d.address: (d.status, d.instance_uuid) for d in table}


# An instance with an allocated GPU and a claimed VF (a resize on one host).
GPU_AND_VF_HELD = [("claim", [GPU], "i1", "r1"), ("allocate", "i1"), ("claim", [VF2A], "i1", "r2")]
FREE = dict.fromkeys((PF1, VF1A, VF1B, PF2, VF2A, VF2B, ORPHAN, GPU), (AVAILABLE, None))

TRANSITIONS = [
    # (name, operations, the devices whose state differs from FREE)
    ("nothing", [], {}),
    ("claim a PCI device", [("claim", [GPU], "i1", "r1")], {GPU: (CLAIMED, "i1")}),
    (
        "claim then allocate",
        [("claim", [GPU], "i1", "r1"), ("allocate", "i1")],
        {GPU: (ALLOCATED, "i1")},
    ),
    ("allocate with no claim changes nothing", [("allocate", "i1")], {}),
    (
        "claim a VF: its PF unclaimable",
        [("claim", [VF1A], "i1", "r1")],
        {VF1A: (CLAIMED, "i1"), PF1: (UNCLAIMABLE, None)},
    ),
    (
        "allocate a VF: its PF unavailable",
        [("claim", [VF1A], "i1", "r1"), ("allocate", "i1")],
        {VF1A: (ALLOCATED, "i1"), PF1: (UNAVAILABLE, None)},
    ),
    (
        "claim a PF: its VFs unclaimable",
        [("claim", [PF1], "i1", "r1")],
        {PF1: (CLAIMED, "i1"), VF1A: (UNCLAIMABLE, None), VF1B: (UNCLAIMABLE, None)},
    ),
    (
        "allocate a PF: its VFs unavailable",
        [("claim", [PF1], "i1", "r1"), ("allocate", "i1")],
        {PF1: (ALLOCATED, "i1"), VF1A: (UNAVAILABLE, None), VF1B: (UNAVAILABLE, None)},
    ),
    ("a VF without a tracked PF", [("claim", [ORPHAN], "i1", "r1")], {ORPHAN: (CLAIMED, "i1")}),
    (
        "two VFs of one PF, two owners",
        [("claim", [VF1A], "i1", "r1"), ("claim", [VF1B], "i2", "r2")],
        {VF1A: (CLAIMED, "i1"), VF1B: (CLAIMED, "i2"), PF1: (UNCLAIMABLE, None)},
    ),
    (
        "one VF allocated, one claimed: PF unavailable",
        [("claim", [VF1A], "i1", "r1"), ("allocate", "i1"), ("claim", [VF1B], "i2", "r2")],
        {VF1A: (ALLOCATED, "i1"), VF1B: (CLAIMED, "i2"), PF1: (UNAVAILABLE, None)},
    ),
    (
        "free one VF: PF stays blocked by the other",
        [("claim", [VF1A], "i1", "r1"), ("claim", [VF1B], "i2", "r2"), ("free", "i1")],
        {VF1B: (CLAIMED, "i2"), PF1: (UNCLAIMABLE, None)},
    ),
    (
        "free the last VF: PF available",
        [("claim", [VF1A, VF1B], "i1", "r1"), ("allocate", "i1"), ("free", "i1")],
        {},
    ),
    ("free a PF: VFs available", [("claim", [PF1], "i1", "r1"), ("free", "i1")], {}),
    (
        "free only the claims",
        [*GPU_AND_VF_HELD, ("free", "i1", None, CLAIMED)],
        {GPU: (ALLOCATED, "i1")},
    ),
    (
        "free only the allocations",
        [*GPU_AND_VF_HELD, ("free", "i1", None, ALLOCATED)],
        {VF2A: (CLAIMED, "i1"), PF2: (UNCLAIMABLE, None)},
    ),
    (
        "free one address",
        [("claim", [GPU, VF2A], "i1", "r1"), ("free", "i1", [GPU])],
        {VF2A: (CLAIMED, "i1"), PF2: (UNCLAIMABLE, None)},
    ),
    ("free an instance holding nothing", [("free", "i9")], {}),
    (
        "allocate touches only the instance's claims",
        [("claim", [GPU], "i1", "r1"), ("claim", [VF2A], "i2", "r2"), ("allocate", "i2")],
        {GPU: (CLAIMED, "i1"), VF2A: (ALLOCATED, "i2"), PF2: (UNAVAILABLE, None)},
    ),
]


@pytest.mark.parametrize(("name", "ops", "changed"), TRANSITIONS, ids=[t[0] for t in TRANSITIONS])
def test_transition(name, ops, changed):
    assert states(run(fresh(), ops)) == FREE | changed


def test_claim_records_the_request():
    table = devices.claim(fresh(), [VF1A, GPU], "i1", "req-1")
    assert [(d.address, d.request_id) for d in devices.of_instance(table, "i1")] == [
        (GPU, "req-1"),
        (VF1A, "req-1"),
    ]
    freed = devices.free(table, "i1")
    assert all(d.request_id is None for d in freed)


REFUSALS = [
    # (name, setup, refused operation, address named, words of the reason)
    ("unknown address", [], ("claim", ["0000:00:00.0"], "i1", "r"), "0000:00:00.0", "no such"),
    ("claimed twice", [("claim", [GPU], "i1", "r")], ("claim", [GPU], "i2", "r"), GPU, "claimed"),
    (
        "claimed again by its owner",
        [("claim", [GPU], "i1", "r")],
        ("claim", [GPU], "i1", "r"),
        GPU,
        "claimed by i1",
    ),
    (
        "allocated device",
        [("claim", [GPU], "i1", "r"), ("allocate", "i1")],
        ("claim", [GPU], "i2", "r"),
        GPU,
        "allocated by i1",
    ),
    ("same address twice in one claim", [], ("claim", [GPU, GPU], "i1", "r"), GPU, "claimed"),
    (
        "a PF whose VF is claimed",
        [("claim", [VF1A], "i1", "r")],
        ("claim", [PF1], "i2", "r"),
        PF1,
        f"unclaimable: its VFs {VF1A}",
    ),
    (
        "a PF whose VF is allocated",
        [("claim", [VF1B], "i1", "r"), ("allocate", "i1")],
        ("claim", [PF1], "i2", "r"),
        PF1,
        "unavailable",
    ),
    (
        "a VF whose PF is claimed",
        [("claim", [PF1], "i1", "r")],
        ("claim", [VF1A], "i2", "r"),
        VF1A,
        f"its PF {PF1} is claimed by i1",
    ),
    (
        "a VF whose PF is allocated",
        [("claim", [PF1], "i1", "r"), ("allocate", "i1")],
        ("claim", [VF1A], "i1", "r"),
        VF1A,
        "unavailable",
    ),
    ("a PF and its VF in one claim", [], ("claim", [VF1A, GPU, PF1], "i1", "r"), PF1, "its VFs"),
    ("a VF and its PF in one claim", [], ("claim", [PF2, VF2B], "i1", "r"), VF2B, "its PF"),
    ("free a free device", [], ("free", "i1", [GPU]), GPU, "available, not"),
    (
        "free another's device",
        [("claim", [GPU], "i1", "r")],
        ("free", "i2", [GPU]),
        GPU,
        "claimed by i1",
    ),
    (
        "free a claim as an allocation",
        [("claim", [GPU], "i1", "r")],
        ("free", "i1", [GPU], ALLOCATED),
        GPU,
        "not allocated",
    ),
    ("free an unknown address", [], ("free", "i1", ["0000:00:00.0"]), "0000:00:00.0", "no such"),
]


@pytest.mark.parametrize(
    ("name", "setup", "op", "address", "words"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_refusal_names_the_device_and_changes_nothing(name, setup, op, address, words):
    table = run(fresh(), setup)
    before = states(table)
    with pytest.raises(errors.InvalidTransition) as caught:
        run(table, [op])
    assert caught.value.kwargs["address"] == address
    assert words in caught.value.kwargs["reason"]
    assert states(table) == before


@pytest.mark.parametrize(
    "op",
    [("claim", [GPU], "", "r"), ("free", "i1", None, "available")],
    ids=["claim without owner", "free in a status that is not held"],
)
def test_invalid_requests(op):
    with pytest.raises(errors.InvalidRequest):
        run(fresh(), [op])


def test_refresh_adds_new_devices_as_available():
    table = devices.refresh(devices.make_table(), SRIOV_HOST[:3])
    assert [d.address for d in table] == [PF1, VF1A, VF1B]
    table = devices.refresh(table, SRIOV_HOST)
    assert states(table) == FREE
    assert dict(table.get(GPU).tags) == {"resource_class": "CUSTOM_GPU"}


def test_refresh_drops_a_free_device_that_disappeared():
    table = devices.refresh(fresh(), [d for d in SRIOV_HOST if d[0].address != GPU])
    assert GPU not in table
    assert devices.held_but_gone(table) == ()


def test_refresh_keeps_a_held_device_that_disappeared_until_freed():
    table = run(fresh(), [("claim", [VF1A, GPU], "i1", "r"), ("allocate", "i1")])
    table = devices.refresh(table, [d for d in SRIOV_HOST if d[0].address not in (VF1A, GPU)])
    assert [(d.address, d.status, d.instance_uuid) for d in devices.held_but_gone(table)] == [
        (GPU, ALLOCATED, "i1"),
        (VF1A, ALLOCATED, "i1"),
    ]
    assert table.get(PF1).status == UNAVAILABLE  # the gone VF still blocks its PF
    table = devices.free(table, "i1")
    assert GPU not in table and VF1A not in table
    assert table.get(PF1).status == AVAILABLE


def test_refresh_drops_a_gone_pf_blocked_by_its_vf():
    table = devices.claim(fresh(), [VF1A], "i1", "r")
    table = devices.refresh(table, [d for d in SRIOV_HOST if d[0].address != PF1])
    assert PF1 not in table
    assert table.get(VF1A).status == CLAIMED and not table.get(VF1A).gone


def test_a_device_back_before_it_is_freed_is_no_longer_gone():
    table = devices.claim(fresh(), [GPU], "i1", "r")
    table = devices.refresh(table, SRIOV_HOST[:-1])
    assert table.get(GPU).gone
    table = devices.refresh(table, SRIOV_HOST)
    assert not table.get(GPU).gone
    assert devices.free(table, "i1").get(GPU).status == AVAILABLE


def test_refresh_updates_facts_in_place_keeping_the_owner():
    table = devices.claim(fresh(), [GPU], "i1", "r")
    moved = dataclasses.replace(SRIOV_HOST[-1][0], numa_node=1)
    table = devices.refresh(table, [*SRIOV_HOST[:-1], (moved, {"resource_class": "CUSTOM_X"})])
    gpu = table.get(GPU)
    assert (gpu.host.numa_node, gpu.status, gpu.instance_uuid) == (1, CLAIMED, "i1")
    assert dict(gpu.tags) == {"resource_class": "CUSTOM_X"}


def test_refresh_rejects_an_address_twice():
    with pytest.raises(ValueError, match="twice"):
        devices.refresh(devices.make_table(), [SRIOV_HOST[0], SRIOV_HOST[0]])


def test_make_table_recomputes_relative_statuses():
    held = devices.Device(vf(VF1A, PF1, 0), status=ALLOCATED, instance_uuid="i1")
    table = devices.make_table([devices.Device(pf(PF1, 0)), held])
    assert states(table) == {PF1: (UNAVAILABLE, None), VF1A: (ALLOCATED, "i1")}
    with pytest.raises(ValueError, match="twice"):
        devices.make_table([held, held])


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "bogus"},
        {"status": CLAIMED},
        {"instance_uuid": "i1"},
        {"request_id": "r1"},
        {"gone": True},
    ],
)
def test_inconsistent_device_is_refused(fields):
    with pytest.raises(ValueError):
        devices.Device(pf(PF1, 0), **fields)


def test_device_tags_are_a_read_only_copy():
    tags = {"traits": ["A"]}
    dev = devices.Device(pf(PF1, 0), tags)
    tags["traits"].append("B")
    assert dev.tags["traits"] == ("A",)
    with pytest.raises(TypeError):
        dev.tags["x"] = 1


# Random operations: claims of random address sets by random instances,
# allocations, frees (whole or one address), and refreshes that hide some
# devices. A refused operation must leave the table as it was.
ADDRESSES = [d[0].address for d in SRIOV_HOST]
INSTANCES = ["i1", "i2", "i3"]
OPERATION = st.one_of(
    st.tuples(
        st.just("claim"),
        st.lists(st.sampled_from(ADDRESSES), max_size=3),
        st.sampled_from(INSTANCES),
    ),
    st.tuples(st.just("allocate"), st.sampled_from(INSTANCES)),
    st.tuples(st.just("free"), st.sampled_from(INSTANCES)),
    st.tuples(st.just("free one"), st.sampled_from(ADDRESSES), st.sampled_from(INSTANCES)),
    st.tuples(st.just("refresh"), st.sets(st.sampled_from(ADDRESSES))),
)


def apply(table, op):
    kind, *args = op
    if kind == "claim":
        return devices.claim(table, args[0], args[1], "r")
    if kind == "allocate":
        return devices.allocate(table, args[0])
    if kind == "free":
        return devices.free(table, args[0])
    if kind == "free one":
        return devices.free(table, args[1], addresses=[args[0]])
    return devices.refresh(table, [d for d in SRIOV_HOST if d[0].address not in args[0]])


def check_invariants(table):
    by_address = table.devices
    for dev in table:
        assert dev.held == (dev.instance_uuid is not None)
        parent = devices.parent_of(by_address, dev)
        if parent is not None and parent.held:
            assert dev.status in (UNCLAIMABLE, UNAVAILABLE)
    for pf_address, vfs in devices.children_of(by_address).items():
        if any(by_address[v].held for v in vfs):
            assert by_address[pf_address].status != AVAILABLE


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPERATION, max_size=25))
def test_random_operations_keep_one_owner_and_the_pf_vf_rules(ops):
    table = fresh()
    for op in ops:
        before = states(table)
        try:
            after = apply(table, op)
        except errors.InvalidTransition:
            assert states(table) == before
            continue
        if op[0] == "claim":
            # Only devices free before may change owner, and only to the claimant.
            for address, (_, owner) in states(after).items():
                if address in before and owner != before[address][1]:
                    assert before[address] == (AVAILABLE, None) and owner == op[2]
        elif op[0] != "refresh":
            for address, (_, owner) in states(after).items():
                old_owner = before.get(address, (None, None))[1]
                assert owner in (old_owner, None)
        check_invariants(after)
        table = after
