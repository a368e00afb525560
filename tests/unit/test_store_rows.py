"""Rows the store reads back are checked before they are believed
(rtagent.tracker.rows): those the tracker writes pass, whatever it holds;
one field out of the bounds the RPC API accepts is named, clipped."""

import json

import pytest

from rtagent.numa.model import CellFit, GuestCell
from rtagent.numa.usage import NumaClaim
from rtagent.pci.held import HeldDevice
from rtagent.resources import frozen_map
from rtagent.tracker import errors, rows
from rtagent.tracker.model import Flavor, Instance, Migration
from tests.unit.helpers import make_tracker

UUID = "00000000-0000-4000-8000-000000000001"
MOVE = "00000000-0000-4000-8000-000000000101"
NODE = "0a000000-0000-4000-8000-00000000000a"
NUMA = NumaClaim(
    (GuestCell(0, 1024, pcpuset=frozenset({0, 1}), pagesize=2048),),
    (CellFit(0, 1, ((0, 4), (1, 5)), frozenset({4, 5, 6}), frozenset({6}), 2048),),
    emulator_isolate=True,
)
VF = HeldDevice("0000:3b:02.3", "port-1", "8086", "154c", "type-VF", 0, "0000:3b:00.0")


def instance_row(**changes):
    instance = Instance(
        UUID,
        Flavor(2, 1024, root_gb=10, name="m1.small"),
        frozen_map({"PCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 10}),
        numa=NUMA,
        pci_devices=(VF,),
        assigned=frozen_map({"CUSTOM_X": ("a", "b")}),
    )
    return json.loads(json.dumps(instance.replace(**changes).to_dict()))


def migration_row():
    move = Migration(
        MOVE,
        UUID,
        "resize",
        NODE,
        NODE,
        Flavor(2, 1024),
        Flavor(2, 2048),
        frozen_map({"PCPU": 2}),
        frozen_map({"PCPU": 2}),
        seq=7,
        old_numa=NUMA,
        new_pci=(VF,),
    )
    return json.loads(json.dumps(move.to_dict()))


def test_rows_the_tracker_writes_are_believed():
    assert rows.problem("instances", UUID, instance_row()) is None
    assert rows.problem("migrations", MOVE, migration_row()) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r["resources"].update(VCPU=-1), "resources.VCPU: -1 is not within 0 to"),
        (lambda r: r["resources"].update(VCPU=2.0), "resources.VCPU: 2.0 is not of type integer"),
        (lambda r: r["resources"].update(VCPU=True), "resources.VCPU: True is not of type"),
        (
            lambda r: r["flavor"].update(vcpus=10**6),
            "flavor.vcpus: 1000000 is not within 1 to 4096",
        ),
        (lambda r: r["flavor"].update(name="x\u202e" * 300), "flavor.name: 'x\\u202ex"),
        (lambda r: r.update(uuid="u"), "uuid: 'u' is not valid"),
        (lambda r: r.update(uuid=MOVE), "is not the row's key"),
        (lambda r: r.update(extra=1), "the row: "),
        (lambda r: r["numa"]["cells"][0].update(host_cell=-1), "numa.cells[0].host_cell: -1"),
        (lambda r: r["numa"]["cells"][0].update(pinning=[[0, 4], [1, 4]]), "two vCPUs on one"),
        (lambda r: r["numa"]["cells"][0].update(pinning=[[0, 4]]), "not the cell's pcpuset"),
        (lambda r: r["numa"]["cells"][0].update(reserved=[9]), "pins host CPUs [9]"),
        (lambda r: r["pci_devices"][0].update(address="x"), "pci_devices[0].address: 'x'"),
        (lambda r: r["pci_devices"][0].update(dev_type="gpu"), "one of type-PCI"),
        (lambda r: r["assigned"].update(CUSTOM_X=["a", "a"]), "assigned.CUSTOM_X"),
    ],
)
def test_a_field_out_of_bounds_is_named(change, says):
    row = instance_row()
    change(row)
    reason = rows.problem("instances", UUID, row)
    assert reason is not None and says in reason, reason
    assert len(reason) < 400


def test_a_moves_claims_are_checked_on_both_sides():
    row = migration_row()
    row["old_numa"]["cells"][0]["taken"] = []
    assert rows.problem("migrations", MOVE, row).startswith("old_numa: cells[0] pins host CPUs")
    row = migration_row()
    row["new_pci"][0]["vendor_id"] = "80861"
    assert rows.problem("migrations", MOVE, row).startswith("new_pci[0].vendor_id: '80861'")


def test_a_stored_ratio_no_placement_reports_is_refused(tmp_path):
    tracker, store = make_tracker(tmp_path)
    node = tracker.node_uuid
    store.set_meta(f"placement_ratios:{node}", json.dumps({"VCPU": "nan"}))
    store.close()
    with pytest.raises(errors.StateError, match=r"allocation ratio of VCPU .* is nan"):
        make_tracker(tmp_path)
