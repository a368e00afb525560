"""PCI claims in the tracker, over a real store: requests by alias or spec
take free devices in the claim's lock and write, refusals change nothing,
PF/VF exclusion holds across instances, NUMA policies follow a NUMA guest's
cells, moves hold and free devices as they hold and free resources, and a
restart (or a host that lost a device) keeps every device held."""

import dataclasses
import json
import logging
import uuid

import pytest

from rtagent.cmd.status import render
from rtagent.conf.pci import PciConfig
from rtagent.pci import alias, devices, model, requests, spec
from rtagent.pci.errors import DevicesUnavailable, InvalidRequest
from rtagent.rpc.status import node_status
from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from rtagent.virt.host import NumaCell
from tests.unit.helpers import make_tracker
from tests.unit.test_numa_claims import NUMA_HOST, PINNED

PF = model.HostDevice("0000:3b:00.0", "8086", "1572", model.TYPE_PF, 0, devname="ens1f0")
# VF0 is the one taken first: of one PF's VFs the highest address, as nova.
VF1, VF0 = (
    model.HostDevice(f"0000:3b:02.{fn}", "8086", "154c", model.TYPE_VF, 0, parent_addr=PF.address)
    for fn in range(2)
)
GPU_CELL1 = model.HostDevice("0000:af:00.0", "10de", "1eb8", model.TYPE_PCI, 1)
GPU_NO_NODE = model.HostDevice("0000:b0:00.0", "10de", "1eb8", model.TYPE_PCI, None)
# Dedicated CPUs on cell 0 only: a pinned guest is always on host cell 0,
# where no GPU is.
HOST = dataclasses.replace(
    NUMA_HOST,
    cpu_shared_set=frozenset({0, 1, 4, 5, 6, 7}),
    cpu_dedicated_set=frozenset({2, 3}),
    pci_devices=(PF, VF1, VF0, GPU_CELL1, GPU_NO_NODE),
)


def _alias(name, vendor, product, dev_type, policy="legacy"):
    return json.dumps(
        {
            "name": name,
            "vendor_id": vendor,
            "product_id": product,
            "device_type": dev_type,
            "numa_policy": policy,
        }
    )


PCI = PciConfig(
    device_specs=spec.parse_device_specs(
        ['{"devname": "ens1f0", "physical_network": "physnet1"}', '{"vendor_id": "10de"}']
    ),
    aliases=alias.parse_aliases(
        [
            _alias("vf", "8086", "154c", model.TYPE_VF),
            _alias("pf", "8086", "1572", model.TYPE_PF),
            *(_alias(f"gpu-{p}", "10de", "1eb8", model.TYPE_PCI, p) for p in ("required",)),
            *(_alias(f"gpu-{p}", "10de", "1eb8", model.TYPE_PCI, p) for p in ("legacy",)),
            *(_alias(f"gpu-{p}", "10de", "1eb8", model.TYPE_PCI, p) for p in ("preferred",)),
        ]
    ),
)
SMALL = Flavor(1, 256)


def new_uuid():
    return str(uuid.uuid4())


def ask(name, count=1, **extra):
    return [{"alias": name, "count": count, **extra}]


@pytest.fixture
def opened(tmp_path):
    made = []

    def open_tracker(host=HOST, pci=PCI):
        for store in made:
            store.close()  # a restart: the last tracker is gone
        tracker, store = make_tracker(tmp_path, pci=pci)
        made.append(store)
        tracker.update_host(host)
        return tracker

    yield open_tracker
    for store in made:
        store.close()


def owners(snapshot):
    """address -> owner of every held device."""
    return {d.address: d.instance_uuid for d in snapshot.pci_devices if d.held}


def recount(snapshot):
    """address -> owner, from the claims alone, by this test's own rules."""
    held = {}

    def add(owner, devs):
        for h in devs:
            assert h.address not in held or held[h.address] == owner, h.address
            held[h.address] = owner

    here = {i.uuid for i in snapshot.instances}
    for instance in snapshot.instances:
        add(instance.uuid, instance.pci_devices)
    for move in snapshot.migrations:
        if move.same_node:
            add(move.instance_uuid, move.old_pci + move.new_pci)
        elif move.instance_uuid not in here:
            add(move.instance_uuid, move.new_pci or move.old_pci)
    return held


def test_an_alias_claim_takes_a_device_and_the_table_shows_it(opened):
    tracker = opened()
    inst = new_uuid()
    claim = tracker.instance_claim(inst, SMALL, pci_requests=ask("vf"))
    (held,) = claim.pci_devices
    assert (held.address, held.dev_type, held.request_id) == (
        VF0.address,
        model.TYPE_VF,
        requests.derived_id(inst, 0),
    )
    snap = tracker.snapshot()
    assert owners(snap) == {VF0.address: inst} == recount(snap)
    assert snap.pci_devices.get(VF0.address).status == devices.ALLOCATED
    assert snap.pci_devices.get(PF.address).status == devices.UNAVAILABLE
    (instance,) = snap.instances
    assert instance.pci_devices == claim.pci_devices
    # Retried: the same claim, the same devices.
    again = tracker.instance_claim(inst, SMALL, pci_requests=ask("vf"))
    assert (again.created, again.pci_devices) == (False, claim.pci_devices)
    assert tracker.snapshot() is snap
    # A retry that asks for other devices is a conflict.
    with pytest.raises(errors.InstanceClaimConflict, match="PCI requests"):
        tracker.instance_claim(inst, SMALL, pci_requests=ask("vf", 2))


VF_1 = ask("vf", request_id="vf-1")
PORT_1 = ask("gpu-legacy", request_id="port-1")


@pytest.mark.parametrize(
    "retry, same",
    [
        (VF_1, True),  # the original call
        (VF_1 + PORT_1, True),  # as the instance's requests are now
        (PORT_1, True),
        ([], True),  # names no request: every one it names is held
        (ask("vf", 2, request_id="vf-1"), False),  # another count
        (VF_1 + ask("gpu-legacy", request_id="port-9"), False),  # an id it holds none for
        (VF_1 + ask("gpu-legacy", 2, request_id="port-1"), False),
    ],
)
def test_a_claim_retried_after_an_attach(opened, retry, same):
    """issue 34: a retry answers the held claim, attached devices with it,
    when the instance holds as many devices as it asks for each request id
    it names; else it is a conflict. Either way nothing changes."""
    tracker = opened()
    inst = new_uuid()
    first = tracker.instance_claim(inst, SMALL, pci_requests=VF_1)
    (port,) = tracker.attach_pci_devices(inst, PORT_1)
    snap = tracker.snapshot()
    if same:
        again = tracker.instance_claim(inst, SMALL, pci_requests=retry)
        assert (again.created, again.pci_devices) == (False, (*first.pci_devices, port))
    else:
        with pytest.raises(errors.InstanceClaimConflict, match="PCI requests"):
            tracker.instance_claim(inst, SMALL, pci_requests=retry)
    assert tracker.snapshot() is snap


def test_a_claim_by_spec_with_a_request_id(opened):
    tracker = opened()
    claim = tracker.instance_claim(
        new_uuid(),
        SMALL,
        pci_requests=[
            {"spec": [{"vendor_id": "10de", "product_id": "1eb8"}], "count": 2, "request_id": "g"}
        ],
    )
    assert [(h.address, h.request_id) for h in claim.pci_devices] == [
        (GPU_CELL1.address, "g"),
        (GPU_NO_NODE.address, "g"),
    ]


@pytest.mark.parametrize(
    "pci_requests, error, field",
    [
        (ask("gpu"), InvalidRequest, "pci_requests.0.alias"),
        (ask("vf", 0), InvalidRequest, "pci_requests.0.count"),
        ([{"spec": [{"vendor_id": "xyz"}], "count": 1}], InvalidRequest, None),
        (ask("vf", 3), DevicesUnavailable, None),  # two VFs
        (ask("pf") + ask("vf"), DevicesUnavailable, None),  # the PF excludes its VFs
        (ask("vf") + ask("gpu-legacy", 3), DevicesUnavailable, None),  # the second fails
    ],
)
def test_a_refused_request_changes_nothing(opened, pci_requests, error, field):
    tracker = opened()
    held = tracker.instance_claim(new_uuid(), SMALL, pci_requests=ask("gpu-legacy"))
    before = tracker.snapshot()
    inst = new_uuid()
    with pytest.raises(error) as caught:
        tracker.instance_claim(inst, SMALL, pci_requests=pci_requests)
    if field:
        assert caught.value.field == field
    assert tracker.snapshot() is before  # no state adopted, nothing written
    with pytest.raises(error):  # on a move too
        tracker.start_move(
            new_uuid(),
            inst,
            "migration",
            source_node=new_uuid(),
            dest_node=tracker.node_uuid,
            old_flavor=SMALL,
            pci_requests=pci_requests,
        )
    assert tracker.snapshot() is before
    # Nothing was written either: a restart finds the one claim.
    snap = opened().snapshot()
    assert [i.uuid for i in snap.instances] == [held.instance_uuid]
    assert owners(snap) == owners(before)


def test_pf_and_vf_exclude_each_other_across_instances(opened):
    tracker = opened()
    a, b, c = new_uuid(), new_uuid(), new_uuid()
    whole = tracker.instance_claim(a, SMALL, pci_requests=ask("pf"))
    assert [h.address for h in whole.pci_devices] == [PF.address]
    with pytest.raises(DevicesUnavailable, match="0 free device"):
        tracker.instance_claim(b, SMALL, pci_requests=ask("vf"))
    tracker.abort_instance_claim(a)
    assert owners(tracker.snapshot()) == {}
    tracker.instance_claim(b, SMALL, pci_requests=ask("vf"))
    with pytest.raises(DevicesUnavailable):
        tracker.instance_claim(c, SMALL, pci_requests=ask("pf"))
    tracker.instance_claim(c, SMALL, pci_requests=ask("vf"))
    snap = tracker.snapshot()
    assert owners(snap) == {VF0.address: b, VF1.address: c} == recount(snap)
    tracker.update_instance(b, vm_state="deleted")
    tracker.abort_instance_claim(c)
    assert tracker.instance_claim(a, SMALL, pci_requests=ask("pf")).pci_devices


def test_numa_policies_follow_the_guest_cells(opened):
    tracker = opened()
    # A pinned guest is on cell 0; the GPUs are on cell 1 and on none.
    with pytest.raises(
        DevicesUnavailable, match=r"required policy allows \(guest on host cells \[0\]"
    ):
        tracker.instance_claim(
            new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-required")
        )
    assert owners(tracker.snapshot()) == {}
    assert tracker.snapshot().usage.get("PCPU", 0) == 0  # its CPUs were not kept either
    legacy = tracker.instance_claim(
        new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-legacy")
    )
    assert [c.host_cell for c in legacy.numa.fits] == [0]
    assert [h.address for h in legacy.pci_devices] == [GPU_NO_NODE.address]
    # A guest without NUMA cells is not filtered: "required" takes cell 1's.
    shared = tracker.instance_claim(new_uuid(), SMALL, pci_requests=ask("gpu-required"))
    assert [h.address for h in shared.pci_devices] == [GPU_CELL1.address]
    tracker.abort_instance_claim(shared.instance_uuid)
    preferred = tracker.instance_claim(
        new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-preferred")
    )
    assert [h.address for h in preferred.pci_devices] == [GPU_CELL1.address]


def test_the_guest_cells_are_chosen_where_its_devices_are(opened):
    # Dedicated CPUs on both cells: the guest fits on cell 0 first, but the
    # only GPU its required policy allows is on cell 1, so it goes there.
    tracker = opened(host=dataclasses.replace(HOST, cpu_dedicated_set=NUMA_HOST.cpu_dedicated_set))
    required = tracker.instance_claim(
        new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-required")
    )
    assert [c.host_cell for c in required.numa.fits] == [1]
    assert [h.address for h in required.pci_devices] == [GPU_CELL1.address]
    # Nowhere left for the next one: the PCI refusal says why, not NUMA.
    with pytest.raises(DevicesUnavailable, match=r"required policy allows \(guest on host"):
        tracker.instance_claim(
            new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-required")
        )


def test_a_guest_without_devices_keeps_off_the_cells_that_have_them(opened):
    # As nova: with cells to spare, a guest that asks for no device is put
    # where the fewest free devices are, one that asks for some where the
    # most are.
    gpu_cell0 = dataclasses.replace(GPU_CELL1, address="0000:ae:00.0", numa_node=0)
    tracker = opened(
        host=dataclasses.replace(
            HOST, cpu_dedicated_set=NUMA_HOST.cpu_dedicated_set, pci_devices=(gpu_cell0,)
        )
    )
    plain = tracker.instance_claim(new_uuid(), SMALL, extra_specs=PINNED)
    assert [c.host_cell for c in plain.numa.fits] == [1]
    with_gpu = tracker.instance_claim(
        new_uuid(), SMALL, extra_specs=PINNED, pci_requests=ask("gpu-preferred")
    )
    assert [c.host_cell for c in with_gpu.numa.fits] == [0]


def test_the_socket_policy_knows_the_socket_of_a_cell_without_cpus(opened):
    # Cell 1 shares socket 0 with the guest's cell 0, but none of its CPUs
    # is in either CPU set (nova's driver lists none): the cell's own socket
    # counts.
    cell0, _ = HOST.numa_cells
    bare = NumaCell(1, 4096, (), socket_id=0)
    tracker = opened(host=dataclasses.replace(HOST, numa_cells=(cell0, bare)))
    claim = tracker.instance_claim(
        new_uuid(),
        SMALL,
        extra_specs=PINNED,
        pci_requests=ask("gpu-required", numa_policy="socket"),
    )
    assert [c.host_cell for c in claim.numa.fits] == [0]
    assert [h.address for h in claim.pci_devices] == [GPU_CELL1.address]


def test_claims_survive_a_restart_and_a_lost_device_stays_held(opened):
    tracker = opened()
    a, b = new_uuid(), new_uuid()
    tracker.instance_claim(a, SMALL, pci_requests=ask("gpu-legacy", 2))
    tracker.instance_claim(b, SMALL, pci_requests=ask("vf"))
    before = owners(tracker.snapshot())

    restarted = opened()
    snap = restarted.snapshot()
    assert owners(snap) == before == recount(snap)
    with pytest.raises(DevicesUnavailable):
        restarted.instance_claim(new_uuid(), SMALL, pci_requests=ask("gpu-legacy"))

    # Restarted on a host without the GPU of cell 1: still held, and said so.
    lost = dataclasses.replace(HOST, pci_devices=(PF, VF1, VF0, GPU_NO_NODE))
    snap = opened(host=lost).snapshot()
    assert owners(snap) == before
    (gone,) = devices.held_but_gone(snap.pci_devices)
    assert (gone.address, gone.instance_uuid, gone.host) == (GPU_CELL1.address, a, GPU_CELL1)
    tracker = opened(host=lost)
    tracker.abort_instance_claim(a)  # freed: gone from the table
    assert GPU_CELL1.address not in tracker.snapshot().pci_devices
    assert owners(tracker.snapshot()) == {VF0.address: b}


def test_a_device_spec_dropped_across_a_restart_keeps_held_devices(opened):
    tracker = opened()
    inst = new_uuid()
    tracker.instance_claim(inst, SMALL, pci_requests=ask("vf"))
    nic_only = dataclasses.replace(PCI, device_specs=PCI.device_specs[1:])
    snap = opened(pci=nic_only).snapshot()
    assert owners(snap) == {VF0.address: inst}
    assert snap.pci_devices.get(VF0.address).gone  # no spec tracks it now


# -- moves --------------------------------------------------------------------


def start(tracker, inst, source, dest, kind="migration", new_flavor=None, **kwargs):
    migration = new_uuid()
    tracker.start_move(
        migration,
        inst,
        kind,
        source_node=source,
        dest_node=dest,
        old_flavor=SMALL,
        new_flavor=new_flavor,
        **kwargs,
    )
    return migration


def test_an_incoming_move_takes_devices_until_reverted(opened):
    tracker = opened()
    inst = new_uuid()
    migration = start(tracker, inst, new_uuid(), tracker.node_uuid, pci_requests=ask("vf"))
    snap = tracker.snapshot()
    (move,) = snap.migrations
    assert [h.address for h in move.new_pci] == [VF0.address]
    assert snap.pci_devices.get(VF0.address).status == devices.CLAIMED
    assert owners(snap) == {VF0.address: inst} == recount(snap)
    # Retried: the same; with other requests: a conflict.
    tracker.start_move(
        migration,
        inst,
        "migration",
        source_node=move.source_node,
        dest_node=tracker.node_uuid,
        old_flavor=SMALL,
        pci_requests=ask("vf"),
    )
    with pytest.raises(errors.MoveConflict, match="pci_requests"):
        tracker.start_move(
            migration,
            inst,
            "migration",
            source_node=move.source_node,
            dest_node=tracker.node_uuid,
            old_flavor=SMALL,
            pci_requests=ask("vf", 2),
        )
    tracker.finish_move(migration)
    snap = tracker.snapshot()
    assert snap.instances[0].pci_devices == move.new_pci
    assert snap.pci_devices.get(VF0.address).status == devices.ALLOCATED
    tracker.revert_move(migration)
    assert owners(tracker.snapshot()) == {}


def test_the_source_keeps_its_devices_until_the_move_is_confirmed(opened):
    tracker = opened()
    inst = new_uuid()
    claim = tracker.instance_claim(inst, SMALL, pci_requests=ask("vf"))
    migration = start(tracker, inst, tracker.node_uuid, new_uuid(), pci_requests=ask("vf"))
    (move,) = tracker.snapshot().migrations
    assert move.old_pci == claim.pci_devices and move.new_pci == ()
    tracker.finish_move(migration)
    snap = tracker.snapshot()
    assert snap.instances == ()
    assert owners(snap) == {VF0.address: inst} == recount(snap)
    tracker.confirm_move(migration)
    assert owners(tracker.snapshot()) == {}


def test_a_same_node_resize_holds_both_until_confirmed_or_reverted(opened):
    tracker = opened()
    node = tracker.node_uuid
    for outcome in ("confirm", "revert"):
        inst = new_uuid()
        old = tracker.instance_claim(inst, SMALL, pci_requests=ask("vf"))
        migration = start(
            tracker, inst, node, node, "resize", Flavor(1, 512), pci_requests=ask("vf")
        )
        (move,) = tracker.snapshot().migrations
        assert move.old_pci == old.pci_devices
        assert [h.address for h in move.new_pci] == [VF1.address]
        tracker.finish_move(migration)
        snap = tracker.snapshot()
        assert owners(snap) == {VF0.address: inst, VF1.address: inst} == recount(snap)
        getattr(tracker, f"{outcome}_move")(migration)
        kept = move.new_pci if outcome == "confirm" else move.old_pci
        (instance,) = tracker.snapshot().instances
        assert instance.pci_devices == kept
        assert owners(tracker.snapshot()) == {kept[0].address: inst}
        tracker.abort_instance_claim(inst)


def test_dropping_a_stale_move_frees_its_devices(opened):
    tracker = opened()
    inst = new_uuid()
    start(tracker, inst, new_uuid(), tracker.node_uuid, pci_requests=ask("gpu-legacy"))
    assert owners(tracker.snapshot())
    tracker.set_migration_context(inst, None)
    assert owners(tracker.snapshot()) == {}


# -- what status and logs say ---------------------------------------------------


def test_status_names_the_owner_of_each_held_device(opened, caplog):
    tracker = opened()
    a, b = new_uuid(), new_uuid()
    tracker.instance_claim(a, SMALL, pci_requests=ask("vf", request_id="port-1"))
    tracker.instance_claim(b, SMALL, pci_requests=ask("gpu-legacy"))
    lost = dataclasses.replace(HOST, pci_devices=(PF, VF1, VF0, GPU_NO_NODE))
    caplog.set_level(logging.WARNING, logger="rtagent.tracker.tracker")
    snap = tracker.update_host(lost)
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records] == [
        f"PCI device {GPU_CELL1.address}, held by instance {b}, is no longer reported by the "
        "host or matched by [pci] device_spec; it stays held until the instance is deleted or "
        "moved away"
    ]
    caplog.clear()
    tracker.update_host(dataclasses.replace(lost, vcpus=7))
    assert caplog.records == []  # said once
    status = node_status(snap, now=0)
    gpu_request = requests.derived_id(b, 0)
    assert status["pci"]["claimed"] == [
        {
            "address": VF0.address,
            "owner": a,
            "request_id": "port-1",
            "status": devices.ALLOCATED,
            "gone": False,
        },
        {
            "address": GPU_CELL1.address,
            "owner": b,
            "request_id": gpu_request,
            "status": devices.ALLOCATED,
            "gone": True,
        },
    ]
    lines = render({"host": "h", "nodes": [status]}).splitlines()
    start = lines.index("  PCI devices: 5 tracked, 2 free in 2 pool(s), 2 held by claims")
    assert lines[start + 3 : start + 5] == [
        f"    {VF0.address} allocated by instance {a} (request port-1)",
        f"    {GPU_CELL1.address} allocated by instance {b} (request {gpu_request}): gone from "
        "the host, freed when the claim ends",
    ]
