"""NUMA claims in the tracker, over a real store: pinned CPUs and pages are
taken by claims and moves, given back by aborts, confirms and reverts, and
recounted from the claims after a restart."""

import dataclasses
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.numa import usage as numa_usage
from rtagent.numa.errors import InvalidConstraint
from rtagent.tracker import errors
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import MEMORY_MB, VCPU, Flavor
from rtagent.virt.host import NumaCell, NumaCpu
from tests.unit.helpers import HOST, make_tracker

# Two cells of two cores x two threads: CPUs 0-3 on cell 0, 4-7 on cell 1;
# siblings (0,1) (2,3) (4,5) (6,7). Dedicated: 2,3 and 6,7; shared: the rest.
# Each cell: 4096 MiB, of which 1024 MiB in 2 MiB pages (512 pages).
SMALL_PAGES = (4096 - 1024) * 256


def _cell(cell_id):
    first = cell_id * 4
    cpus = tuple(
        NumaCpu(
            id=first + i,
            socket_id=cell_id,
            core_id=i // 2,
            siblings=frozenset({first + i - i % 2, first + i - i % 2 + 1}),
        )
        for i in range(4)
    )
    return NumaCell(cell_id, 4096, cpus, pages=((4, SMALL_PAGES), (2048, 512)))


NUMA_HOST = dataclasses.replace(
    HOST,
    vcpus=8,
    memory_mb=8192,
    numa_cells=(_cell(0), _cell(1)),
    cpu_shared_set=frozenset({0, 1, 4, 5}),
    cpu_dedicated_set=frozenset({2, 3, 6, 7}),
)
PCPUS = NUMA_HOST.cpu_dedicated_set
PINNED = {"hw:cpu_policy": "dedicated"}


def new_uuid():
    return str(uuid.uuid4())


@pytest.fixture
def opened(tmp_path):
    made = []

    def open_tracker(host=NUMA_HOST, policy=None):
        for store in made:
            store.close()  # a restart: the last tracker is gone
        tracker, store = make_tracker(tmp_path, policy)
        made.append(store)
        tracker.update_host(host)
        return tracker

    yield open_tracker
    for store in made:
        store.close()


def pinned_by(snapshot):
    """consumer -> host CPUs, from every NUMA claim the snapshot holds."""
    held = {}
    for instance in snapshot.instances:
        if instance.numa is not None:
            held[instance.uuid] = instance.numa.pinned
    return held


def recounted(snapshot):
    """The snapshot's cells recounted from scratch from the claims it lists
    (the tracker carries the usage from state to state instead)."""
    host = snapshot.host
    cells = numa_usage.host_cells(
        host.numa_cells,
        host.cpu_shared_set,
        host.cpu_dedicated_set,
        snapshot.policy.reserved_huge_pages,
        host.online_cpus,
    )
    return numa_usage.with_usage(cells, [c for _, c in snapshot.numa_claims])


def assert_each_cpu_once(snapshot):
    owners = {}
    for instance in snapshot.instances:
        for cpu in instance.numa.pinned if instance.numa else ():
            assert cpu not in owners, f"CPU {cpu} pinned by {owners[cpu]} and {instance.uuid}"
            owners[cpu] = instance.uuid
    used = set().union(*(c.pinned for c in snapshot.numa_cells))
    assert used == set(owners)
    assert used <= PCPUS
    assert snapshot.numa_cells == recounted(snapshot)


def test_a_pinned_claim_takes_dedicated_cpus_and_counts_them_as_pcpu(opened):
    tracker = opened()
    claim = tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=PINNED)
    assert dict(claim.resources) == {"PCPU": 2, MEMORY_MB: 512}
    assert claim.numa is not None
    (cell,) = claim.numa.fits
    # Both threads of one core (siblings first), a core of the dedicated set.
    assert {p for _, p in cell.pinning} in ({2, 3}, {6, 7})
    snap = tracker.snapshot()
    assert snap.usage["PCPU"] == 2
    assert_each_cpu_once(snap)


def test_pinned_claims_never_share_a_cpu_and_a_full_host_refuses(opened):
    tracker = opened()
    for _ in range(4):
        tracker.instance_claim(new_uuid(), Flavor(1, 256), extra_specs=PINNED)
    before = tracker.snapshot()
    assert_each_cpu_once(before)
    assert set().union(*pinned_by(before).values()) == PCPUS
    with pytest.raises(errors.ComputeResourcesUnavailable) as refused:
        tracker.instance_claim(new_uuid(), Flavor(1, 256), extra_specs=PINNED)
    assert "PCPU" in str(refused.value)
    assert tracker.snapshot().instances == before.instances


def test_the_numa_fit_refuses_what_the_counts_allow(opened):
    # 4 PCPU are free in total, but no cell has 3 free dedicated CPUs.
    tracker = opened()
    with pytest.raises(errors.ComputeResourcesUnavailable) as refused:
        tracker.instance_claim(new_uuid(), Flavor(3, 256), extra_specs=PINNED)
    reason = str(refused.value)
    assert "NUMA:" in reason and "cell 0: 2 free dedicated CPU(s)" in reason
    assert tracker.snapshot().instances == ()


def test_an_abort_gives_the_cpus_back(opened):
    tracker = opened()
    uuids = [new_uuid() for _ in range(4)]
    for uid in uuids:
        tracker.instance_claim(uid, Flavor(1, 256), extra_specs=PINNED)
    freed = pinned_by(tracker.snapshot())[uuids[1]]
    tracker.abort_instance_claim(uuids[1])
    claim = tracker.instance_claim(new_uuid(), Flavor(1, 256), extra_specs=PINNED)
    assert claim.numa.pinned == freed
    assert_each_cpu_once(tracker.snapshot())


def test_a_restart_recounts_the_same_cells(opened):
    tracker = opened()
    tracker.instance_claim(new_uuid(), Flavor(2, 1024), extra_specs=PINNED)
    tracker.instance_claim(
        new_uuid(), Flavor(2, 512), extra_specs={"hw:numa_nodes": "2", "hw:mem_page_size": "2MB"}
    )
    before = tracker.snapshot()
    again = opened()
    after = again.snapshot()
    assert after.instances == before.instances
    assert after.numa_cells == before.numa_cells
    assert_each_cpu_once(after)


def test_hugepage_claims_take_pages_and_never_overcommit_them(opened):
    tracker = opened()
    specs = {"hw:mem_page_size": "large"}
    claim = tracker.instance_claim(new_uuid(), Flavor(1, 1024), extra_specs=specs)
    assert claim.numa.fits[0].pagesize_kb == 2048
    assert dict(claim.resources) == {VCPU: 1, MEMORY_MB: 1024}
    cells = tracker.snapshot().numa_cells
    assert sorted(c.pages[1].used for c in cells) == [0, 512]
    tracker.instance_claim(new_uuid(), Flavor(1, 1024), extra_specs=specs)
    with pytest.raises(errors.ComputeResourcesUnavailable, match="free 2048 KiB pages"):
        tracker.instance_claim(new_uuid(), Flavor(1, 2), extra_specs=specs)


@pytest.mark.parametrize("pack, cells", [(False, [0, 1]), (True, [0, 0])])
def test_guests_spread_over_cells_or_pack_into_the_fullest(opened, pack, cells):
    tracker = opened(policy=ResourcePolicy(reserved_host_memory_mb=0, numa_pack=pack))
    placed = [
        tracker.instance_claim(new_uuid(), Flavor(1, 512), extra_specs=PINNED).numa.fits[0]
        for _ in range(2)
    ]
    assert sorted(p.host_cell for p in placed) == cells


def test_reserved_huge_pages_are_not_handed_out(opened):
    policy = ResourcePolicy(reserved_host_memory_mb=0, reserved_huge_pages=((0, 2048, 512),))
    tracker = opened(policy=policy)
    claim = tracker.instance_claim(
        new_uuid(), Flavor(1, 1024), extra_specs={"hw:mem_page_size": "2048"}
    )
    assert claim.numa.fits[0].host_cell == 1
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.instance_claim(new_uuid(), Flavor(1, 2), extra_specs={"hw:mem_page_size": "2048"})


def test_a_retried_claim_is_the_same_claim_and_other_cells_conflict(opened):
    tracker = opened()
    uid = new_uuid()
    first = tracker.instance_claim(uid, Flavor(2, 512), extra_specs=PINNED)
    again = tracker.instance_claim(uid, Flavor(2, 512), extra_specs=PINNED)
    assert not again.created and again.numa == first.numa
    with pytest.raises(errors.InstanceClaimConflict):
        tracker.instance_claim(uid, Flavor(2, 512), extra_specs={**PINNED, "hw:numa_nodes": "2"})


def test_an_invalid_extra_spec_is_refused_before_anything_changes(opened):
    tracker = opened()
    with pytest.raises(InvalidConstraint) as refused:
        tracker.instance_claim(
            new_uuid(), Flavor(2, 512), extra_specs={"hw:cpu_thread_policy": "sometimes"}
        )
    assert refused.value.key == "hw:cpu_thread_policy"
    with pytest.raises(errors.InvalidClaimRequest):
        tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs=["hw:numa_nodes"])
    assert tracker.snapshot().instances == ()


def test_a_host_without_cells_refuses_numa_guests(opened):
    tracker = opened(host=HOST)
    with pytest.raises(errors.ComputeResourcesUnavailable, match="reports no cells"):
        tracker.instance_claim(new_uuid(), Flavor(1, 512), extra_specs={"hw:numa_nodes": "1"})


def test_pins_outside_the_dedicated_set_are_reported(opened):
    tracker = opened()
    uid = new_uuid()
    claim = tracker.instance_claim(uid, Flavor(2, 512), extra_specs=PINNED)
    tracker.update_host(
        dataclasses.replace(
            NUMA_HOST,
            cpu_shared_set=NUMA_HOST.cpu_shared_set | claim.numa.pinned,
            cpu_dedicated_set=PCPUS - claim.numa.pinned,
        )
    )
    assert dict(tracker.snapshot().numa_lost) == {uid: tuple(sorted(claim.numa.pinned))}


def test_lost_pins_are_logged_once_per_change(opened, caplog):
    tracker = opened()
    uid = new_uuid()
    claim = tracker.instance_claim(uid, Flavor(2, 512), extra_specs=PINNED)
    moved = dataclasses.replace(
        NUMA_HOST,
        cpu_shared_set=NUMA_HOST.cpu_shared_set | claim.numa.pinned,
        cpu_dedicated_set=PCPUS - claim.numa.pinned,
    )
    with caplog.at_level("WARNING"):
        for _ in range(3):
            tracker.update_host(moved)
    warnings = [r.getMessage() for r in caplog.records if "no longer dedicated" in r.getMessage()]
    cpus = ",".join(str(c) for c in sorted(claim.numa.pinned))
    assert len(warnings) == 1 and f"{uid} keeps pinned CPU(s) {cpus}" in warnings[0]


# -- moves -------------------------------------------------------------------


def _move(tracker, source, dest, instance, new_flavor=None, kind="migration", specs=PINNED):
    migration = new_uuid()
    tracker.start_move(
        migration,
        instance,
        kind,
        source_node=source,
        dest_node=dest,
        old_flavor=Flavor(2, 512),
        new_flavor=new_flavor,
        extra_specs=specs,
    )
    return migration


def test_an_incoming_move_pins_at_the_destination_until_reverted(opened):
    tracker = opened()
    node = tracker.node_uuid
    inst = new_uuid()
    migration = _move(tracker, new_uuid(), node, inst)
    snap = tracker.snapshot()
    (move,) = snap.migrations
    assert move.new_numa is not None and len(move.new_numa.pinned) == 2
    assert set().union(*(c.pinned for c in snap.numa_cells)) == move.new_numa.pinned
    tracker.finish_move(migration)
    (landed,) = tracker.snapshot().instances
    assert landed.numa == move.new_numa
    tracker.revert_move(migration)
    snap = tracker.snapshot()
    assert snap.instances == () and all(not c.pinned for c in snap.numa_cells)


def test_the_source_keeps_its_pins_until_the_move_is_confirmed(opened):
    tracker = opened()
    node = tracker.node_uuid
    inst = new_uuid()
    claim = tracker.instance_claim(inst, Flavor(2, 512), extra_specs=PINNED)
    migration = _move(tracker, node, new_uuid(), inst)
    tracker.finish_move(migration)
    snap = tracker.snapshot()
    assert snap.instances == ()
    assert set().union(*(c.pinned for c in snap.numa_cells)) == claim.numa.pinned
    tracker.confirm_move(migration)
    assert all(not c.pinned for c in tracker.snapshot().numa_cells)


def test_a_same_node_resize_holds_both_topologies_until_confirmed(opened):
    tracker = opened()
    node = tracker.node_uuid
    inst = new_uuid()
    old = tracker.instance_claim(inst, Flavor(2, 512), extra_specs=PINNED)
    migration = _move(tracker, node, node, inst, new_flavor=Flavor(2, 1024), kind="resize")
    (move,) = tracker.snapshot().migrations
    assert move.old_numa == old.numa
    assert not move.new_numa.pinned & old.numa.pinned
    assert_each_cpu_once_in_cells(tracker.snapshot(), 4)
    tracker.confirm_move(migration)
    (instance,) = tracker.snapshot().instances
    assert instance.numa == move.new_numa
    assert_each_cpu_once_in_cells(tracker.snapshot(), 2)


def test_a_retried_start_at_the_source_of_a_pinned_guest_is_the_same_move(opened):
    # The source records what the instance holds (PCPU); the retry states
    # the old flavor as VCPU. Found by test_crash's SIGKILL rounds.
    tracker = opened()
    node, dest, inst = tracker.node_uuid, new_uuid(), new_uuid()
    tracker.instance_claim(
        inst, Flavor(1, 512), extra_specs={**PINNED, "hw:emulator_threads_policy": "isolate"}
    )
    args = dict(source_node=node, dest_node=dest, old_flavor=Flavor(1, 512), extra_specs=PINNED)
    first = tracker.start_move(MIGRATION, inst, "migration", **args)
    assert dict(first.old_resources) == {"PCPU": 2, MEMORY_MB: 512}
    assert tracker.start_move(MIGRATION, inst, "migration", **args) == first
    with pytest.raises(errors.MoveConflict, match="old_flavor"):
        tracker.start_move(MIGRATION, inst, "migration", **{**args, "old_flavor": Flavor(2, 512)})


MIGRATION = "7f0c8e6a-1b2c-4d3e-8f40-5a6b7c8d9e0f"


def test_a_reverted_same_node_resize_keeps_the_old_pins(opened):
    tracker = opened()
    node = tracker.node_uuid
    inst = new_uuid()
    old = tracker.instance_claim(inst, Flavor(2, 512), extra_specs=PINNED)
    migration = _move(tracker, node, node, inst, new_flavor=Flavor(2, 1024), kind="resize")
    tracker.finish_move(migration)
    tracker.revert_move(migration)
    (instance,) = tracker.snapshot().instances
    assert instance.numa == old.numa
    assert_each_cpu_once_in_cells(tracker.snapshot(), 2)


def assert_each_cpu_once_in_cells(snapshot, count):
    pinned = [c.pinned for c in snapshot.numa_cells]
    assert sum(len(p) for p in pinned) == count


# -- any sequence --------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("claim"),
            st.integers(1, 3),
            st.sampled_from(
                [
                    PINNED,
                    {**PINNED, "hw:cpu_thread_policy": "isolate"},
                    {**PINNED, "hw:cpu_thread_policy": "require"},
                    {**PINNED, "hw:emulator_threads_policy": "isolate"},
                    {"hw:numa_nodes": "1", "hw:mem_page_size": "large"},
                    {"hw:numa_nodes": "2"},
                ]
            ),
        ),
        st.tuples(st.just("abort"), st.integers(0, 9), st.none()),
        st.tuples(st.just("restart"), st.none(), st.none()),
    ),
    max_size=25,
)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_any_sequence_keeps_each_cpu_and_page_owned_once(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("numa-seq")
    tracker, store = make_tracker(path)
    stores = [store]
    try:
        tracker.update_host(NUMA_HOST)
        held = []
        for op, arg, specs in ops:
            if op == "claim":
                uid = new_uuid()
                try:
                    tracker.instance_claim(uid, Flavor(arg * 2, 512 * arg), extra_specs=specs)
                    held.append(uid)
                except (errors.ComputeResourcesUnavailable, InvalidConstraint):
                    pass
            elif op == "abort" and held:
                tracker.abort_instance_claim(held.pop(arg % len(held)))
            elif op == "restart":
                before = tracker.snapshot()
                store.close()
                tracker, store = make_tracker(path)
                stores.append(store)
                tracker.update_host(NUMA_HOST)
                assert tracker.snapshot().numa_cells == before.numa_cells
            snap = tracker.snapshot()
            assert_each_cpu_once(snap)
            assert {i.uuid for i in snap.instances} == set(held)
            for cell in snap.numa_cells:
                for pages in cell.pages[1:]:
                    assert 0 <= pages.used <= pages.total
            assert snap.usage.get("PCPU", 0) == sum(
                i.resources.get("PCPU", 0) for i in snap.instances
            )
    finally:
        for s in stores:
            s.close()


# -- what the scheduler reads ----------------------------------------------------


def test_the_compute_node_view_carries_the_cells_as_nova_reads_them(opened):
    from rtagent.tracker.view import compute_node

    tracker = opened()
    claim = tracker.instance_claim(new_uuid(), Flavor(2, 1024), extra_specs=PINNED)
    tracker.instance_claim(new_uuid(), Flavor(2, 512), extra_specs={"hw:mem_page_size": "2MB"})
    view = compute_node(tracker.snapshot(), "192.0.2.1")
    assert view["vcpus_used"] == 4  # nova's: every vCPU, the 2 pinned ones too
    assert view["vcpus"] == 4  # the shared CPUs: VCPU's total
    cells = view["numa_topology"]["cells"]
    assert [c["id"] for c in cells] == [0, 1]
    pinned = {cpu for c in cells for cpu in c["pinned_cpus"]}
    assert pinned == claim.numa.pinned
    assert {cpu for c in cells for cpu in c["pcpuset"]} == PCPUS
    assert {cpu for c in cells for cpu in c["cpuset"]} == NUMA_HOST.cpu_shared_set
    assert cells[0]["siblings"] == [[0, 1], [2, 3]]
    assert sum(c["memory_usage"] for c in cells) == 1536
    assert sum(c["cpu_usage"] for c in cells) == 2
    pages = [p for c in cells for p in c["mempages"] if p["size_kb"] == 2048]
    assert sorted(p["used"] for p in pages) == [0, 256]
    assert all(p["total"] == 512 and p["reserved"] == 0 for p in pages)
    assert compute_node(opened(host=HOST).snapshot(), "192.0.2.1")["numa_topology"] is None


def test_status_names_who_keeps_each_dedicated_cpu(opened):
    from rtagent.cmd.status import render
    from rtagent.rpc.status import node_status

    tracker = opened()
    uid = new_uuid()
    claim = tracker.instance_claim(uid, Flavor(2, 512), extra_specs=PINNED)
    node = node_status(tracker.snapshot(), now=0)
    cells = {c["id"]: c for c in node["numa"]["cells"]}
    host_cell = claim.numa.fits[0].host_cell
    assert cells[host_cell]["pinned"] == {str(c): uid for c in sorted(claim.numa.pinned)}
    text = render({"host": "h", "nodes": [node]})
    assert f"NUMA cell {host_cell}: 2/2 dedicated CPU(s) pinned" in text
    for cpu in claim.numa.pinned:
        assert f"CPU {cpu}: {uid}" in text
    # The host now reports no cells: the claim's CPUs are reported, not freed.
    gone = node_status(opened(host=HOST).snapshot(), now=0)["numa"]
    assert gone == {
        "cells": [],
        "lost_cpus": {uid: sorted(claim.numa.pinned)},
        "unclaimed_cpus": {},
    }
    assert "no longer dedicated CPUs" in render({"host": "h", "nodes": [{**node, "numa": gone}]})
