"""nova's upgrade fallback in the tracker, over a real store: without
``cpu_dedicated_set`` pinned guests pin the shared CPUs and count VCPU; once
the set is given, their claims count PCPU (kept across a restart)."""

import dataclasses
import uuid

import pytest

from rtagent.numa import running_pins
from rtagent.numa import usage as numa_usage
from rtagent.numa.model import CellFit, GuestCell
from rtagent.numa.usage import NumaClaim
from rtagent.placement import reshape
from rtagent.tracker import errors, requests
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor
from tests.unit.helpers import make_tracker
from tests.unit.test_numa_claims import NUMA_HOST

LEGACY_HOST = dataclasses.replace(NUMA_HOST, cpu_shared_set=None, cpu_dedicated_set=None)
DEDICATED_HOST = dataclasses.replace(
    NUMA_HOST, cpu_shared_set=None, cpu_dedicated_set=frozenset(range(8))
)
FALLBACK = ResourcePolicy(reserved_host_memory_mb=0, pinning_fallback=True)
NO_FALLBACK = ResourcePolicy(reserved_host_memory_mb=0)
PINNED = {"hw:cpu_policy": "dedicated"}
MIXED = {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"}
ISOLATED_EMULATOR = {"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}


def new_uuid():
    return str(uuid.uuid4())


@pytest.fixture
def opened(tmp_path):
    made = []

    def open_tracker(host, policy):
        for store in made:
            store.close()  # a restart: the last tracker is gone
        tracker, store = make_tracker(tmp_path, policy)
        made.append(store)
        tracker.update_host(host)
        return tracker

    yield open_tracker
    for store in made:
        store.close()


@pytest.mark.parametrize(
    ("host", "policy", "offered"),
    [
        # No set at all: the shared CPUs may be pinned too (nova's fallback).
        (LEGACY_HOST, FALLBACK, "the shared CPUs"),
        (LEGACY_HOST, NO_FALLBACK, "none"),
        (DEDICATED_HOST, FALLBACK, "the dedicated set"),
        (NUMA_HOST, FALLBACK, "the dedicated set"),
    ],
)
def test_the_cpus_a_host_offers_for_pinning(opened, host, policy, offered):
    cells = opened(host, policy).snapshot().numa_cells
    dedicated = host.cpu_dedicated_set or frozenset()
    for cell in cells:
        expected = {
            "the shared CPUs": cell.cpuset,
            "none": frozenset(),
            "the dedicated set": (cell.cpuset | cell.pcpuset) & dedicated,
        }[offered]
        assert cell.pcpuset == expected
    if offered == "the shared CPUs":
        assert all(cell.cpuset for cell in cells)


@pytest.mark.parametrize(
    ("specs", "vcpus", "held"),
    [
        (PINNED, 2, {"VCPU": 2, "MEMORY_MB": 512}),
        (MIXED, 3, {"VCPU": 3, "MEMORY_MB": 512}),
        # nova's fallback query asks for the flavor's vCPUs, no more.
        (ISOLATED_EMULATOR, 2, {"VCPU": 2, "MEMORY_MB": 512}),
        (None, 2, {"VCPU": 2, "MEMORY_MB": 512}),
    ],
)
def test_in_the_fallback_claims_count_vcpu(opened, specs, vcpus, held):
    tracker = opened(LEGACY_HOST, FALLBACK)
    claim = tracker.instance_claim(new_uuid(), Flavor(vcpus, 512), extra_specs=specs)
    assert dict(claim.resources) == held
    # A retry is the same claim, not a conflict.
    again = tracker.instance_claim(claim.instance_uuid, Flavor(vcpus, 512), extra_specs=specs)
    assert dict(again.resources) == held


def test_pinned_and_floating_guests_share_the_cells(opened):
    tracker = opened(LEGACY_HOST, FALLBACK)
    first = tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=PINNED)
    floating = tracker.instance_claim(
        new_uuid(), Flavor(2, 512), extra_specs={"hw:numa_nodes": "1"}
    )
    second = tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=PINNED)
    assert not first.numa.pinned & second.numa.pinned
    assert not floating.numa.pinned
    cells = tracker.snapshot().numa_cells
    # The floating guest counts against the cell's shared CPUs, pinned or not.
    assert sum(cell.cpu_usage for cell in cells) == 2
    assert sum(len(cell.pinned) for cell in cells) == 4


def test_without_the_fallback_a_pinned_guest_is_refused(opened):
    tracker = opened(LEGACY_HOST, NO_FALLBACK)
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=PINNED)


def test_a_move_to_a_fallback_host_counts_vcpu(opened):
    tracker = opened(LEGACY_HOST, FALLBACK)
    node = tracker.node_uuid
    tracker.start_move(
        new_uuid(),
        new_uuid(),
        "migration",
        source_node=str(uuid.UUID(int=7)),
        dest_node=node,
        old_flavor=Flavor(2, 512),
        extra_specs=PINNED,
    )
    (move,) = tracker.snapshot().migrations
    assert dict(move.new_resources) == {"VCPU": 2, "MEMORY_MB": 512}
    assert move.new_numa.pinned


def test_setting_the_dedicated_set_counts_the_claims_as_pcpu(opened):
    tracker = opened(LEGACY_HOST, FALLBACK)
    pinned = tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=PINNED)
    mixed = tracker.instance_claim(new_uuid(), Flavor(3, 512), extra_specs=MIXED)
    floating = tracker.instance_claim(new_uuid(), Flavor(1, 512))
    leaving = tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=PINNED)
    move = new_uuid()
    tracker.start_move(
        move,
        leaving.instance_uuid,
        "migration",
        source_node=tracker.node_uuid,
        dest_node=str(uuid.UUID(int=7)),
        old_flavor=Flavor(2, 512),
        extra_specs=PINNED,
    )
    tracker = opened(
        dataclasses.replace(
            LEGACY_HOST,
            cpu_dedicated_set=frozenset({2, 3, 6, 7}),
            cpu_shared_set=frozenset({0, 1, 4, 5}),
        ),
        FALLBACK,
    )
    held = {i.uuid: dict(i.resources) for i in tracker.snapshot().instances}
    assert held[pinned.instance_uuid] == {"PCPU": 2, "MEMORY_MB": 512}
    assert held[mixed.instance_uuid] == {"PCPU": 2, "VCPU": 1, "MEMORY_MB": 512}
    assert held[floating.instance_uuid] == {"VCPU": 1, "MEMORY_MB": 512}
    (moving,) = tracker.snapshot().migrations
    assert dict(moving.old_resources) == {"PCPU": 2, "MEMORY_MB": 512}
    # Kept in the store: a second restart reads them so.
    tracker = opened(DEDICATED_HOST, FALLBACK)
    held = {i.uuid: dict(i.resources) for i in tracker.snapshot().instances}
    assert held[pinned.instance_uuid] == {"PCPU": 2, "MEMORY_MB": 512}


def _claim(pinned, shared=0, emulator=False):
    guest = GuestCell(
        0, 512, cpuset=frozenset(range(pinned, pinned + shared)), pcpuset=frozenset(range(pinned))
    )
    return NumaClaim((guest,), (CellFit(0, 0),), emulator)


@pytest.mark.parametrize(
    ("amounts", "numa", "on_dedicated"),
    [
        ({"VCPU": 2}, _claim(2), {"PCPU": 2}),
        ({"VCPU": 3}, _claim(2, 1), {"PCPU": 2, "VCPU": 1}),
        ({"VCPU": 2}, _claim(2, emulator=True), {"PCPU": 3}),
        ({"PCPU": 2}, _claim(2), {"PCPU": 2}),
        ({"VCPU": 2}, None, {"VCPU": 2}),
    ],
)
def test_counting_on_dedicated_cpus(amounts, numa, on_dedicated):
    assert requests.on_dedicated_cpus(amounts, numa) == on_dedicated


def test_a_floating_guests_pins_hold_nothing_in_the_fallback():
    cells = numa_usage.host_cells(LEGACY_HOST.numa_cells, fallback=True)
    floating = type("Dom", (), {"uuid": "d", "pinned_cpus": frozenset(range(8))})()
    assert running_pins.pinned_dedicated([floating], cells) == {}


class _Allocations:
    """GET /allocations/{c} answers, for reshape.with_seeded."""

    def __init__(self, bodies):
        self._bodies = bodies

    def get_allocations(self, consumer):
        return self._bodies[consumer]


@pytest.mark.parametrize(
    ("held", "seed", "after"),
    [
        ({"VCPU": 2, "MEMORY_MB": 512}, 2, {"PCPU": 2, "MEMORY_MB": 512}),
        ({"VCPU": 3, "MEMORY_MB": 512}, 2, {"PCPU": 2, "VCPU": 1, "MEMORY_MB": 512}),
        ({"VCPU": 2, "MEMORY_MB": 512}, 3, {"PCPU": 3, "MEMORY_MB": 512}),
    ],
)
def test_a_pcpu_seed_on_the_root_replaces_vcpu(held, seed, after):
    body = {
        "allocations": {"root": {"resources": held}},
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": 1,
    }
    bodies = reshape.with_seeded(
        _Allocations({"c": body}), {}, {"c": {"root": {"PCPU": seed}}}, "root"
    )
    assert bodies["c"]["allocations"] == {"root": {"resources": after}}
