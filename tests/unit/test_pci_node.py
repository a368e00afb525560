"""A node's PCI devices from host views built by hand: which devices are
tracked, which a domain holds without a claim (PCI drift), how those are
kept out of pools, and how the tracker, the compute-node view and
``rtagent status`` show them. Pure parts and a tracker over a real store;
the same over the libvirt test driver is tests/functional/test_pci_tracking.py.
"""

import dataclasses
import logging

import pytest

from rtagent.cmd.status import render
from rtagent.conf.pci import PciConfig
from rtagent.pci import devices, model, node, pools, spec
from rtagent.pci import held as pci_held
from rtagent.pci.held import HeldDevice
from rtagent.pci.model import HostDevice
from rtagent.rpc.status import node_status
from rtagent.tracker import view
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.virt.host import DOMAIN_RUNNING, DOMAIN_SHUTOFF, DomainInfo, HostView
from tests.unit.helpers import make_tracker

PF = HostDevice("0000:3b:00.0", "8086", "1572", model.TYPE_PF, 0, devname="ens1f0")
VF0, VF1 = (
    HostDevice(f"0000:3b:02.{fn}", "8086", "154c", model.TYPE_VF, 0, parent_addr=PF.address)
    for fn in range(2)
)
GPU = HostDevice("0000:af:00.0", "10de", "1eb8", model.TYPE_PCI, 1)
ROOT_PORT = HostDevice("0000:3a:00.0", "8086", "2030", model.TYPE_PCI, 0)
DEVICES = (ROOT_PORT, PF, VF0, VF1, GPU)
A = "aaaaaaaa-0000-4000-8000-000000000001"
B = "bbbbbbbb-0000-4000-8000-000000000002"


def specs(*values):
    return spec.parse_device_specs(list(values))


NIC = '{"devname": "ens1f0", "physical_network": "physnet1"}'
ANY_GPU = '{"vendor_id": "10de"}'
SPECS = specs(NIC, ANY_GPU)


def dom(uuid, *held, state=DOMAIN_RUNNING, name=None):
    return DomainInfo(uuid, name or f"dom-{uuid[0]}", state, 1, 512, host_devices=held)


def host(*domains, pci=DEVICES):
    return HostView(
        "node1",
        "QEMU",
        1,
        vcpus=4,
        memory_mb=4096,
        local_gb=100,
        domains=tuple(domains),
        pci_devices=pci,
    )


def statuses(table):
    return {d.address: (d.status, d.instance_uuid) for d in table}


# -- which devices are tracked ----------------------------------------------


def test_the_first_matching_spec_gives_its_tags():
    found = node.tracked(DEVICES, specs(NIC, '{"vendor_id": "8086", "x": "second"}', ANY_GPU))
    assert [(d.address, dict(tags)) for d, tags in found] == [
        ("0000:3a:00.0", {"x": "second"}),  # only the second matches the root port
        ("0000:3b:00.0", {"physical_network": "physnet1"}),
        ("0000:3b:02.0", {"physical_network": "physnet1"}),
        ("0000:3b:02.1", {"physical_network": "physnet1"}),
        ("0000:af:00.0", {}),
    ]


def test_a_vf_matches_its_pf_devname_only_when_the_host_reports_the_pf():
    assert [d.address for d, _ in node.tracked((VF0, VF1), SPECS)] == []
    assert [d.address for d, _ in node.tracked((PF, VF0), SPECS)] == [PF.address, VF0.address]


def test_no_spec_tracks_nothing():
    assert node.tracked(DEVICES, ()) == ()


# -- held without a claim -----------------------------------------------------


def test_held_devices_are_those_tracked_that_a_domain_names():
    table, held = node.node_devices(
        host(
            dom(A, VF0.address, ROOT_PORT.address, "mdev:4b20d080-1b54-4048-85b3-a6a62d165c01"),
            dom(B, GPU.address, state=DOMAIN_SHUTOFF),  # starting it takes the GPU back
        ),
        SPECS,
    )
    assert held == (
        node.HeldWithoutClaim(VF0.address, A, "dom-a"),
        node.HeldWithoutClaim(GPU.address, B, "dom-b"),
    )  # the root port is not tracked, the mdev is no PCI function
    assert statuses(table) == {
        PF.address: (devices.UNAVAILABLE, None),  # a VF of it is in a guest
        VF0.address: (devices.ALLOCATED, A),
        VF1.address: (devices.AVAILABLE, None),
        GPU.address: (devices.ALLOCATED, B),
    }
    assert [(p.address, p.count) for p in pools.pools(table)] == [(PF.address, 1)]  # VF1


def test_a_held_pf_blocks_its_vfs():
    table, _ = node.node_devices(host(dom(A, PF.address)), SPECS)
    assert statuses(table)[VF0.address] == (devices.UNAVAILABLE, None)
    assert [p.dev_type for p in pools.pools(table)] == [model.TYPE_PCI]  # the GPU alone


def test_a_device_two_domains_name_is_reported_twice_and_owned_by_the_first():
    table, held = node.node_devices(host(dom(A, GPU.address), dom(B, GPU.address)), SPECS)
    assert [(h.address, h.owner) for h in held] == [(GPU.address, A), (GPU.address, B)]
    assert statuses(table)[GPU.address] == (devices.ALLOCATED, A)


def test_mark_held_changes_nothing_without_holds():
    table, _ = node.node_devices(host(), SPECS)
    assert node.mark_held(table, ()) is table
    assert all(d.status == devices.AVAILABLE for d in table)


# -- claims' holds --------------------------------------------------------------


def hold(dev, request_id="r1"):
    return HeldDevice.of(devices.Device(host=dev), request_id)


def test_holds_are_applied_on_rebuild_with_their_pf_vf_effects():
    holds = [(A, hold(VF0), devices.ALLOCATED), (B, hold(GPU, "r2"), devices.CLAIMED)]
    table, held = node.node_devices(host(), SPECS, holds)
    assert held == ()
    assert statuses(table) == {
        PF.address: (devices.UNAVAILABLE, None),
        VF0.address: (devices.ALLOCATED, A),
        VF1.address: (devices.AVAILABLE, None),
        GPU.address: (devices.CLAIMED, B),
    }
    assert table.get(GPU.address).request_id == "r2"
    # No holds: what discovery gives, every device free.
    assert {s for s, _ in statuses(node.node_devices(host(), SPECS)[0]).values()} == {
        devices.AVAILABLE
    }


def test_a_held_device_the_host_no_longer_reports_stays_held_and_gone():
    holds = [(A, hold(GPU), devices.ALLOCATED)]
    table, _ = node.node_devices(host(pci=(PF, VF0, VF1)), SPECS, holds)
    gone = table.get(GPU.address)
    assert (gone.status, gone.instance_uuid, gone.gone) == (devices.ALLOCATED, A, True)
    assert gone.host == GPU  # its facts, from the hold
    assert devices.held_but_gone(table) == (gone,)
    # Freed (the claim ended): dropped.
    assert GPU.address not in node.node_devices(host(pci=(PF, VF0, VF1)), SPECS)[0]
    # Back on the host: no longer gone.
    assert not node.node_devices(host(), SPECS, holds)[0].get(GPU.address).gone


def test_a_domain_holding_its_own_claimed_device_is_no_drift():
    holds = [(A, hold(VF0), devices.ALLOCATED)]
    table, held = node.node_devices(host(dom(A, VF0.address), dom(B, VF0.address)), SPECS, holds)
    # B holds a device A's claim has: drift, and the device stays A's.
    assert held == (node.HeldWithoutClaim(VF0.address, B, "dom-b"),)
    assert statuses(table)[VF0.address] == (devices.ALLOCATED, A)


def test_a_device_two_holds_name_stays_with_the_first():
    holds = [(A, hold(GPU), devices.ALLOCATED), (B, hold(GPU, "r2"), devices.CLAIMED)]
    assert statuses(node.with_holds(node.discover(host(), SPECS).table, holds))[GPU.address] == (
        devices.ALLOCATED,
        A,
    )


def test_choose_holds_devices_in_request_order_with_their_facts():
    table = node.discover(host(), SPECS).table
    requests = [
        pools.PciRequest("gpu", 1, ({"vendor_id": "10de"},)),
        pools.PciRequest("vfs", 2, ({"product_id": "154c"},)),
    ]
    chosen = pci_held.choose(table, requests)
    assert [(h.address, h.request_id) for h in chosen] == [
        (GPU.address, "gpu"),
        (VF0.address, "vfs"),
        (VF1.address, "vfs"),
    ]
    assert chosen[1].host_device() == VF0
    assert chosen[1].describe() == {
        "address": VF0.address,
        "dev_type": model.TYPE_VF,
        "vendor_id": "8086",
        "product_id": "154c",
        "numa_node": 0,
        "request_id": "vfs",
    }
    assert pci_held.choose(table, []) == ()


# -- in the tracker -----------------------------------------------------------


@pytest.fixture
def tracker(tmp_path):
    made, store = make_tracker(tmp_path / "state", pci=PciConfig(device_specs=SPECS))
    yield made
    store.close()


def test_the_table_follows_the_host_and_a_release_frees_the_device(tracker):
    snap = tracker.update_host(host(dom(A, VF0.address)))
    assert statuses(snap.pci_devices)[VF0.address] == (devices.ALLOCATED, A)
    assert [h.address for h in snap.pci_held] == [VF0.address]

    snap = tracker.update_host(host(dom(A)))  # detached: rebuilt, not patched
    assert snap.pci_held == ()
    assert {s for s, _ in statuses(snap.pci_devices).values()} == {devices.AVAILABLE}

    snap = tracker.update_host(host(pci=(GPU,)))  # the NIC was removed
    assert list(statuses(snap.pci_devices)) == [GPU.address]


def test_inputs_that_are_the_same_objects_reuse_the_table(tracker):
    reading = host(dom(A, VF0.address))
    table = tracker.update_host(reading).pci_devices
    tracker.set_policy(ResourcePolicy(reserved_host_memory_mb=256))
    assert tracker.snapshot().pci_devices is table
    # Equal but new tuples (another driver): derived again, equal.
    again = dataclasses.replace(
        reading, vcpus=8, domains=tuple(list(reading.domains)), pci_devices=tuple(list(DEVICES))
    )
    rebuilt = tracker.update_host(again).pci_devices
    assert rebuilt == table and rebuilt is not table


def test_a_tracker_without_pci_options_tracks_nothing(tmp_path):
    made, store = make_tracker(tmp_path / "state")
    try:
        snap = made.update_host(host(dom(A, GPU.address)))
        assert (len(snap.pci_devices), snap.pci_held) == (0, ())
    finally:
        store.close()


def test_changes_are_logged_once(tracker, caplog):
    caplog.set_level(logging.INFO, logger="rtagent.tracker.tracker")

    def logged():
        lines = [r.getMessage() for r in caplog.records if "PCI" in r.getMessage()]
        caplog.clear()
        return [line.split(": ", 1)[1] for line in lines]

    tracker.update_host(host())
    assert logged() == ["4 of the host's 5 PCI device(s) match [pci] device_spec"]
    tracker.update_host(host(dom(A, GPU.address, name="by-hand")))
    assert logged() == [
        f"PCI device {GPU.address} is held by domain by-hand ({A}) without a claim; it is "
        "not offered to guests while the domain has it"
    ]
    tracker.update_host(host(dom(A, GPU.address, name="by-hand"), dom(B)))
    assert logged() == []  # the same devices, the same holds
    tracker.update_host(host())
    assert logged() == [f"PCI device {GPU.address} is no longer held by domain by-hand ({A})"]


# -- the compute-node view and status ------------------------------------------


def test_the_view_and_status_show_pools_and_held_devices(tracker):
    snap = tracker.update_host(host(dom(A, GPU.address, name="by-hand")))
    cn = view.compute_node(snap, "192.0.2.7")
    assert cn["pci_device_pools"] == pools.as_nova_pools(pools.pools(snap.pci_devices))
    assert [(p["product_id"], p["count"]) for p in cn["pci_device_pools"]] == [
        ("154c", 2),
        ("1572", 1),
    ]
    status = node_status(snap, now=0)
    assert status["pci"] == {"devices": 4, "pools": cn["pci_device_pools"], "claimed": []}
    assert status["drift"]["pci_devices_held"] == [
        {"address": GPU.address, "owner": A, "domain": "by-hand"}
    ]
    lines = render({"host": "h", "nodes": [status]}).splitlines()
    assert (
        "  drift: 1 domain(s) without a claim, 0 instance(s) without a domain, "
        "1 PCI device(s) held without a claim"
    ) in lines
    start = lines.index("  PCI devices: 4 tracked, 3 free in 2 pool(s)")
    assert lines[start + 1 : start + 4] == [
        f"    8086:154c type-VF of PF {PF.address}, NUMA node 0: 2 free physical_network=physnet1",
        f"    8086:1572 type-PF at {PF.address}, NUMA node 0: 1 free physical_network=physnet1",
        f"    {GPU.address} held by domain by-hand {A} without a claim",
    ]


def test_status_is_one_line_without_devices_and_silent_for_an_older_agent(tracker):
    status = node_status(tracker.update_host(host(pci=())), now=0)
    lines = render({"host": "h", "nodes": [status]}).splitlines()
    assert [line for line in lines if "PCI" in line] == [
        "  PCI devices: none matched by [pci] device_spec"
    ]
    del status["pci"], status["drift"]["pci_devices_held"]
    assert "PCI" not in render({"host": "h", "nodes": [status]})
