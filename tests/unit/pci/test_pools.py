# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Pools of free PCI devices (nova's keys and counts, nova's published
shape) and the choice of devices for requests under each NUMA policy and
the PF/VF rules."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.pci import devices, errors, model, pools
from rtagent.pci.pools import LEGACY, PREFERRED, REQUIRED, SOCKET, PciRequest
from tests.unit.pci.hosts import GPU, PF1, PF2, VF1A, VF1B, VF2A, VF2B, sriov_pairs, vf

# The shared host (tests/unit/pci/hosts.py) and a GPU with no NUMA node.
SRIOV_HOST = (
    *sriov_pairs(),
    (model.HostDevice(GPU, "10de", "1db4"), {"resource_class": "CUSTOM_GPU", "traits": ("A",)}),
)

# Four cells, 0-1 on socket 0 and 2-3 on socket 1; a GPU on each of cells
# 0, 1 and 2 and one with no NUMA node.
GPU0, GPU1, GPU2, GPUX = "0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"
NUMA_HOST = tuple(
    (model.HostDevice(address, "10de", "1db4", numa_node=node), {})
    for address, node in ((GPU0, 0), (GPU1, 1), (GPU2, 2), (GPUX, None))
)
SOCKETS = {0: 0, 1: 0, 2: 1, 3: 1}
GPU_SPEC = {"vendor_id": "10de", "product_id": "1db4"}
VF_SPEC = {"vendor_id": "8086", "product_id": "154c"}
PF_SPEC = {"vendor_id": "8086", "dev_type": model.TYPE_PF}


def table_of(host, *claims):
    table = devices.refresh(devices.make_table(), host)
    for addresses, owner in claims:
        table = devices.claim(table, addresses, owner, "r0")
    return table


def request(spec, count=1, policy=LEGACY, request_id="r1", alias=None):
    specs = spec if isinstance(spec, tuple) else (spec,)
    return PciRequest(request_id, count, specs, policy, alias)


def summary(pool_values):
    return [
        (p.vendor_id, p.product_id, p.numa_node, p.dev_type, p.address, p.count, dict(p.tags))
        for p in pool_values
    ]


PHYSNET1 = {"physical_network": "physnet1", "remote_managed": "false"}
PHYSNET2 = {"physical_network": "physnet2", "remote_managed": "false"}
ALL_POOLS = [
    ("10de", "1db4", None, model.TYPE_PCI, GPU, 1, {}),
    ("8086", "154c", 0, model.TYPE_VF, PF1, 2, PHYSNET1),
    ("8086", "154c", 1, model.TYPE_VF, PF2, 2, PHYSNET2),
    ("8086", "1572", 0, model.TYPE_PF, PF1, 1, PHYSNET1),
    ("8086", "1572", 1, model.TYPE_PF, PF2, 1, PHYSNET2),
]

POOL_CASES = [
    ("all free", [], ALL_POOLS),
    (
        "a VF held: its PF leaves, its pool shrinks",
        [([VF1A], "i1")],
        [ALL_POOLS[0], (*ALL_POOLS[1][:5], 1, PHYSNET1), ALL_POOLS[2], ALL_POOLS[4]],
    ),
    ("a PF held: its VFs leave", [([PF2], "i1")], [ALL_POOLS[0], ALL_POOLS[1], ALL_POOLS[3]]),
    ("everything held", [([GPU, VF1A, VF1B, PF2], "i1")], []),
]


@pytest.mark.parametrize(("name", "claims", "expected"), POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_pools_key_and_count_free_devices(name, claims, expected):
    assert summary(pools.pools(table_of(SRIOV_HOST, *claims))) == expected


def test_pools_split_on_tags_and_node():
    host = (
        (vf(VF1A, PF1, 0), {"trusted": True}),
        (vf(VF1B, PF1, 0), {"trusted": False}),
        (vf(VF2A, PF1, 1), {"trusted": True}),
        (vf(VF2B, PF1, 0), {"trusted": True, "remote_managed": "true"}),
    )
    assert [p.addresses for p in pools.pools(table_of(host))] == [
        (VF1B,),
        (VF1A,),
        (VF2B,),
        (VF2A,),
    ]


def test_as_nova_pools_is_pci_device_pool_shaped():
    host = ((vf(VF1A, PF1, 0), {"physical_network": "physnet1", "trusted": True}),)
    assert pools.as_nova_pools(pools.pools(table_of(host))) == [
        {
            "vendor_id": "8086",
            "product_id": "154c",
            "numa_node": 0,
            "count": 1,
            "tags": {
                "dev_type": model.TYPE_VF,
                "address": PF1,
                "physical_network": "physnet1",
                "remote_managed": "false",
                "trusted": "true",
            },
        }
    ]


NUMA_CASES = [
    # (name, count, policy, guest's host cells, cell->socket, chosen or None)
    ("no NUMA guest", 1, LEGACY, None, None, [GPU0]),
    ("empty cells mean no NUMA", 4, REQUIRED, frozenset(), None, [GPU0, GPU1, GPU2, GPUX]),
    ("legacy: on the guest's cell", 1, LEGACY, {2}, None, [GPU2]),
    ("legacy: no node makes up", 2, LEGACY, {0}, None, [GPU0, GPUX]),
    ("legacy: never another cell", 3, LEGACY, {0}, None, None),
    ("legacy: no node alone", 1, LEGACY, {3}, None, [GPUX]),
    ("required: guest's cells", 2, REQUIRED, {0, 1}, None, [GPU0, GPU1]),
    ("required: no node refused", 2, REQUIRED, {0}, None, None),
    ("required: nothing on the cell", 1, REQUIRED, {3}, None, None),
    ("preferred: local first", 1, PREFERRED, {1}, None, [GPU1]),
    ("preferred: no node before other cells", 2, PREFERRED, {1}, None, [GPU1, GPUX]),
    ("preferred: falls back to other cells", 3, PREFERRED, {1}, None, [GPU0, GPU1, GPUX]),
    ("preferred: anything", 4, PREFERRED, {3}, None, [GPU0, GPU1, GPU2, GPUX]),
    ("socket: local enough", 1, SOCKET, {2}, SOCKETS, [GPU2]),
    ("socket: same socket", 2, SOCKET, {0}, SOCKETS, [GPU0, GPU1]),
    ("socket: cell with no device", 1, SOCKET, {3}, SOCKETS, [GPU2]),
    ("socket: never no node", 3, SOCKET, {0}, SOCKETS, None),
    ("socket: other socket refused", 2, SOCKET, {2}, SOCKETS, None),
    ("socket: without socket ids only local", 2, SOCKET, {0}, None, None),
    ("socket: a cell without socket id", 2, SOCKET, {0, 3}, {0: 0, 1: 0}, [GPU0, GPU1]),
]


@pytest.mark.parametrize(
    ("name", "count", "policy", "cells", "sockets", "expected"),
    NUMA_CASES,
    ids=[c[0] for c in NUMA_CASES],
)
def test_numa_policy(name, count, policy, cells, sockets, expected):
    table = table_of(NUMA_HOST)
    req = request(GPU_SPEC, count, policy)
    cells = frozenset(cells) if cells is not None else None
    if expected is None:
        with pytest.raises(errors.DevicesUnavailable):
            pools.select(table, [req], cells, sockets)
    else:
        assert pools.select(table, [req], cells, sockets) == {"r1": tuple(expected)}


def test_shortfall_names_the_request_and_counts():
    table = table_of(NUMA_HOST, ([GPU1], "other"))
    with pytest.raises(errors.DevicesUnavailable) as caught:
        pools.select(table, [request(GPU_SPEC, 3, alias="gpu")], frozenset({0}))
    assert caught.value.kwargs["reason"] == (
        "request r1 (alias 'gpu') needs 3: 3 free device(s) match,"
        " 2 on NUMA cells the legacy policy allows (guest on host cells [0])"
    )


def test_shortfall_without_alias_shows_specs_and_left_out_pfs():
    with pytest.raises(errors.DevicesUnavailable) as caught:
        pools.select(table_of(SRIOV_HOST), [request({"vendor_id": "8086"}, 5)])
    assert caught.value.kwargs["reason"] == (
        'request r1 (specs [{"vendor_id": "8086"}]) needs 5: 6 free device(s) match'
        " (2 of them PFs or remote-managed, not asked for)"
    )


SELECT_CASES = [
    # (name, devices held by another instance, requests, chosen or None)
    # Of one PF's VFs the highest address first: the one nova would give.
    ("one VF", [], [request(VF_SPEC)], {"r1": (VF1B,)}),
    ("VFs packed on one PF", [], [request(VF_SPEC, 2)], {"r1": (VF1A, VF1B)}),
    ("a VF of an already blocked PF first", [([VF2A], "x")], [request(VF_SPEC)], {"r1": (VF2B,)}),
    (
        "PFs only when asked",
        [],
        [request({"vendor_id": "8086"}, 4)],
        {"r1": (VF1A, VF1B, VF2A, VF2B)},
    ),
    ("a PF when asked", [], [request(PF_SPEC)], {"r1": (PF1,)}),
    ("a PF blocked by a held VF", [([VF1A], "x")], [request(PF_SPEC)], {"r1": (PF2,)}),
    (
        "a PF then VFs: not its own",
        [],
        [request(PF_SPEC), request(VF_SPEC, 2, request_id="r2")],
        {"r1": (PF1,), "r2": (VF2A, VF2B)},
    ),
    (
        "a VF then two PFs: one is blocked",
        [],
        [request(VF_SPEC), request(PF_SPEC, 2, request_id="r2")],
        None,
    ),
    (
        "PF or VF: the VF blocks less",
        [],
        [request(({**PF_SPEC, "product_id": "1572"}, VF_SPEC))],
        {"r1": (VF1B,)},
    ),
    (
        "a PF and its VFs cannot make a count",
        [([PF2], "x")],
        [request(({**PF_SPEC, "product_id": "1572"}, VF_SPEC), 3)],
        None,
    ),
    ("tags case-insensitive", [], [request({"physical_network": "PHYSNET2"})], {"r1": (VF2B,)}),
    (
        "resource_class and traits left to Placement",
        [],
        [request({**GPU_SPEC, "resource_class": "CUSTOM_OTHER", "traits": "B"})],
        {"r1": (GPU,)},
    ),
    ("any spec of several", [], [request(({"product_id": "ffff"}, GPU_SPEC))], {"r1": (GPU,)}),
    ("no device matches", [], [request({"product_id": "ffff"})], None),
    ("a held device is not free", [([GPU], "x")], [request(GPU_SPEC)], None),
]


@pytest.mark.parametrize(
    ("name", "held", "requests", "expected"), SELECT_CASES, ids=[c[0] for c in SELECT_CASES]
)
def test_select(name, held, requests, expected):
    table = table_of(SRIOV_HOST, *held)
    if expected is None:
        with pytest.raises(errors.DevicesUnavailable):
            pools.select(table, requests)
    else:
        assert pools.select(table, requests) == expected


def test_vfs_follow_the_guest_cell():
    table = table_of(SRIOV_HOST)
    assert pools.select(table, [request(VF_SPEC, 2, REQUIRED)], frozenset({1})) == {
        "r1": (VF2A, VF2B)
    }


def test_shortfall_says_when_a_pf_and_its_vfs_exclude_each_other():
    table = table_of(SRIOV_HOST, ([PF2], "x"))
    either = request(({**PF_SPEC, "product_id": "1572"}, VF_SPEC), 3)
    with pytest.raises(errors.DevicesUnavailable, match="a PF and its VFs cannot both be taken"):
        pools.select(table, [either])


def test_list_tags_match_as_subsets():
    host = ((model.HostDevice(GPU, "10de", "1db4"), {"features": ("a", "b")}),)
    table = table_of(host)
    assert pools.select(table, [request({"features": ["a"]})]) == {"r1": (GPU,)}
    with pytest.raises(errors.DevicesUnavailable):
        pools.select(table, [request({"features": ["c"]})])


def test_remote_managed_devices_only_when_asked():
    host = ((vf(VF1A, PF1, 0), {"remote_managed": "true"}),)
    table = table_of(host)
    with pytest.raises(errors.DevicesUnavailable):
        pools.select(table, [request(VF_SPEC)])
    asked = request({**VF_SPEC, "remote_managed": "True"})
    assert pools.select(table, [asked]) == {"r1": (VF1A,)}


@pytest.mark.parametrize(
    "fields",
    [
        {"request_id": ""},
        {"count": 0},
        {"count": True},
        {"count": "1"},
        {"specs": ()},
        {"numa_policy": "strict"},
    ],
)
def test_invalid_request(fields):
    values = {"request_id": "r1", "count": 1, "specs": (GPU_SPEC,)} | fields
    with pytest.raises(errors.InvalidRequest):
        PciRequest(**values)


def test_request_defaults_and_frozen_specs():
    spec = dict(GPU_SPEC)
    req = PciRequest("r1", 1, (spec,), numa_policy=None)
    spec["vendor_id"] = "ffff"
    assert req.numa_policy == LEGACY and req.specs[0]["vendor_id"] == "10de"


def test_request_ids_must_differ():
    with pytest.raises(errors.InvalidRequest):
        pools.select(table_of(SRIOV_HOST), [request(VF_SPEC), request(VF_SPEC)])


SPECS = st.sampled_from(
    [VF_SPEC, PF_SPEC, GPU_SPEC, {"vendor_id": "8086"}, {"dev_type": "type-PF"}]
)
ADDRESSES = [d[0].address for d in SRIOV_HOST]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    held=st.lists(st.sampled_from(ADDRESSES), max_size=3),
    wanted=st.lists(
        st.tuples(st.lists(SPECS, min_size=1, max_size=2), st.integers(1, 3)), max_size=3
    ),
    cells=st.one_of(st.none(), st.sets(st.integers(0, 1), min_size=1).map(frozenset)),
    policy=st.sampled_from(pools.NUMA_POLICIES),
)
def test_selection_is_claimable(held, wanted, cells, policy):
    table = table_of(SRIOV_HOST)
    for address in held:
        try:
            table = devices.claim(table, [address], "other", "r0")
        except errors.InvalidTransition:
            pass
    requests = [
        PciRequest(f"r{i}", count, tuple(specs), policy) for i, (specs, count) in enumerate(wanted)
    ]
    try:
        chosen = pools.select(table, requests, cells, SOCKETS)
    except errors.DevicesUnavailable:
        return
    assert chosen == pools.select(table, requests, cells, SOCKETS)
    taken = [a for addresses in chosen.values() for a in addresses]
    assert len(taken) == len(set(taken))
    for req in requests:
        assert len(chosen[req.request_id]) == req.count
        table = devices.claim(table, chosen[req.request_id], "guest", req.request_id)


def test_rp_uuids_admit_only_the_devices_of_those_providers():
    # Placement allocated the request from PF2's provider: PF1's VFs,
    # though free and matching, are not given.
    node = "3f1c2b2a-0000-4000-8000-000000000001"
    table = table_of(sriov_pairs())
    pf2_rp = pools.provider_uuid(node, PF2)
    req = PciRequest("r1", 1, ({**VF_SPEC, "rp_uuids": (pf2_rp,)},))
    assert pools.select(table, [req], node_uuid=node) == {"r1": (VF2B,)}
    two = PciRequest("r1", 2, ({**VF_SPEC, "rp_uuids": (pf2_rp,)},))
    assert pools.select(table, [two], node_uuid=node) == {"r1": (VF2A, VF2B)}
    three = PciRequest("r1", 3, ({**VF_SPEC, "rp_uuids": (pf2_rp,)},))
    with pytest.raises(errors.DevicesUnavailable):
        pools.select(table, [three], node_uuid=node)


def test_rp_uuids_naming_a_provider_per_device_give_exactly_those_counts():
    # nova's scheduler allocated one VF of PF1 and two of PF2 and names PF2
    # twice. Ranked freely, the two VFs would both come from one PF; the
    # device allocations in Placement would then not match the claim.
    node = "3f1c2b2a-0000-4000-8000-000000000001"
    table = table_of(sriov_pairs())
    pf1_rp, pf2_rp = pools.provider_uuid(node, PF1), pools.provider_uuid(node, PF2)
    split = PciRequest("r1", 2, ({**VF_SPEC, "rp_uuids": (pf2_rp, pf1_rp)},))
    assert split.provider_counts == {pf1_rp: 1, pf2_rp: 1}
    # (Ranked freely, both would be PF1's: "VFs packed on one PF" above.)
    assert pools.select(table, [split], node_uuid=node) == {"r1": (VF1B, VF2B)}
    twice = PciRequest("r1", 2, ({**VF_SPEC, "rp_uuids": (pf2_rp, pf2_rp)},))
    assert pools.select(table, [twice], node_uuid=node) == {"r1": (VF2A, VF2B)}
    # Named three times, PF1 has only two VFs: refused, not made up elsewhere.
    three = PciRequest("r1", 3, ({**VF_SPEC, "rp_uuids": (pf1_rp,) * 3},))
    with pytest.raises(errors.DevicesUnavailable):
        pools.select(table, [three], node_uuid=node)


def test_a_null_tag_matches_only_devices_without_it():
    # PF2's VFs carry physical_network; PF1's do not. A tunnel port's spec
    # (physical_network None) takes one of PF1's, though PF2's rank alike.
    table = table_of([(dev, {} if dev.parent_addr == PF1 else tags) for dev, tags in sriov_pairs()])
    req = PciRequest("r1", 1, ({**VF_SPEC, "physical_network": None},))
    assert pools.select(table, [req]) == {"r1": (VF1B,)}
    physnet = PciRequest("r1", 1, ({**VF_SPEC, "physical_network": "physnet2"},))
    assert pools.select(table, [physnet]) == {"r1": (VF2B,)}


# A PF whose two VFs the host exposes as vDPA devices (nova's "vdpa").
VDPA_PF, VDPA_A, VDPA_B = "0000:09:00.0", "0000:09:00.1", "0000:09:00.2"
VDPA_HOST = (
    (model.HostDevice(VDPA_PF, "15b3", "101d", model.TYPE_PF, 0), {}),
    (model.HostDevice(VDPA_A, "15b3", "101e", model.TYPE_VDPA, 0, VDPA_PF), {}),
    (model.HostDevice(VDPA_B, "15b3", "101e", model.TYPE_VDPA, 0, VDPA_PF), {}),
)
VDPA_SPEC = {"vendor_id": "15b3", "product_id": "101e", "dev_type": model.TYPE_VDPA}


def test_a_vdpa_device_is_given_only_to_a_request_that_asks_for_vdpa():
    table = table_of(VDPA_HOST)
    any_function = {"vendor_id": "15b3", "product_id": "101e"}
    with pytest.raises(errors.DevicesUnavailable):
        pools.select(table, [request(any_function)])
    assert pools.select(table, [request(VDPA_SPEC, 2)]) == {"r1": (VDPA_A, VDPA_B)}


def test_a_vdpa_device_and_its_pf_exclude_each_other_as_a_vf_and_its_pf():
    held = table_of(VDPA_HOST, ([VDPA_B], "i1"))
    assert [(p.dev_type, p.count) for p in pools.pools(held)] == [(model.TYPE_VDPA, 1)]
    with pytest.raises(errors.DevicesUnavailable):
        pools.select(held, [request({"dev_type": model.TYPE_PF, "vendor_id": "15b3"})])
    pf_held = table_of(VDPA_HOST, ([VDPA_PF], "i1"))
    assert pools.pools(pf_held) == ()
