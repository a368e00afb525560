"""The tracker over a real SQLite store: claims, refusals, restart, fairness."""

import dataclasses
import threading
import time
import uuid

import pytest

from rtagent.tracker import errors
from rtagent.tracker.model import DISK_GB, MEMORY_MB, VCPU, Flavor
from tests.unit.helpers import HOST, make_tracker

SMALL = Flavor(vcpus=1, memory_mb=512, root_gb=10)


@pytest.fixture
def tracker(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)  # capacity: 16 VCPU (4 x 4.0), 4096 MiB, 100 GiB
    yield tracker
    store.close()


def rows(store_path):
    import sqlite3

    db = sqlite3.connect(f"{store_path}/rtagent.sqlite")
    try:
        return [r[0] for r in db.execute("SELECT uuid FROM instances ORDER BY rowid")]
    finally:
        db.close()


def test_claim_is_accounted_and_durable(tracker, tmp_path):
    uid = str(uuid.uuid4())
    claim = tracker.instance_claim(uid, SMALL)
    assert dict(claim.resources) == {VCPU: 1, MEMORY_MB: 512, DISK_GB: 10}
    assert dict(tracker.snapshot().usage) == {VCPU: 1, MEMORY_MB: 512, DISK_GB: 10}
    assert rows(tmp_path) == [uid]


def test_refused_claim_changes_neither_ledger_nor_store(tracker, tmp_path):
    tracker.instance_claim(str(uuid.uuid4()), SMALL)
    before, stored = tracker.snapshot(), rows(tmp_path)
    with pytest.raises(errors.ComputeResourcesUnavailable) as info:
        tracker.instance_claim(str(uuid.uuid4()), Flavor(vcpus=1, memory_mb=4000))
    assert info.value.code == "tracker.compute_resources_unavailable"
    assert "MEMORY_MB: requested 4000, free 3584" in str(info.value)
    assert tracker.snapshot() == before
    assert rows(tmp_path) == stored


def test_scheduler_limits_are_enforced(tracker):
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.instance_claim(str(uuid.uuid4()), Flavor(4, 512), limits={"vcpu": 3})


def test_claims_before_the_first_audit_are_refused(tmp_path):
    tracker, store = make_tracker(tmp_path)
    with pytest.raises(errors.NodeNotReady):
        tracker.instance_claim(str(uuid.uuid4()), SMALL)
    store.close()


@pytest.mark.parametrize("bad", ["nope", "", None, 42])
def test_malformed_instance_uuid_is_refused(tracker, bad):
    with pytest.raises(errors.InvalidClaimRequest):
        tracker.instance_claim(bad, SMALL)
    assert tracker.snapshot().instances == ()


def test_repeated_claim_is_idempotent_and_a_different_one_conflicts(tracker):
    uid = str(uuid.uuid4())
    first = tracker.instance_claim(uid, SMALL)
    again = tracker.instance_claim(uid.upper(), SMALL)
    assert (first.created, again.created) == (True, False)
    assert again.resources == first.resources and again.instance_uuid == first.instance_uuid
    with pytest.raises(errors.InstanceClaimConflict):
        tracker.instance_claim(uid, Flavor(2, 512, 10))
    assert len(tracker.snapshot().instances) == 1


def test_abort_releases_and_is_idempotent(tracker, tmp_path):
    uid = str(uuid.uuid4())
    tracker.instance_claim(uid, SMALL)
    assert tracker.abort_instance_claim(uid) is True
    assert tracker.abort_instance_claim(uid) is False
    assert dict(tracker.snapshot().usage) == {VCPU: 0, MEMORY_MB: 0, DISK_GB: 0}
    assert rows(tmp_path) == []


def test_failed_durable_write_changes_nothing(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    store.close()  # every write now fails inside SQLite
    with pytest.raises(errors.StateError):
        tracker.instance_claim(str(uuid.uuid4()), SMALL)
    assert tracker.snapshot().instances == ()


def test_a_new_tracker_over_the_same_state_has_the_same_node_and_instances(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    uids = sorted(str(uuid.uuid4()) for _ in range(3))
    for uid in uids:
        tracker.instance_claim(uid, SMALL)
    node, usage = tracker.node_uuid, dict(tracker.snapshot().usage)
    store.close()

    again, store2 = make_tracker(tmp_path)
    again.update_host(HOST)
    snap = again.snapshot()
    assert again.node_uuid == node
    assert [i.uuid for i in snap.instances] == uids
    assert dict(snap.usage) == usage
    store2.close()


def test_snapshots_are_copies(tracker):
    snap = tracker.snapshot()
    tracker.instance_claim(str(uuid.uuid4()), SMALL)
    assert snap.instances == ()
    with pytest.raises(TypeError):
        snap.usage[VCPU] = 99


def test_lock_serves_waiting_claims_in_arrival_order(tracker, tmp_path):
    """Threads queue while the lock is held; the store's insertion order
    (SQLite rowid) shows the order in which the lock served them."""
    uids = [str(uuid.uuid4()) for _ in range(12)]
    tiny = Flavor(vcpus=1, memory_mb=64, root_gb=1)
    pending = tracker._lock._pending_writers  # fasteners' FIFO of waiters
    threads = []
    with tracker._locked("test"):
        for i, uid in enumerate(uids):
            t = threading.Thread(target=tracker.instance_claim, args=(uid, tiny))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 5
            while len(pending) < i + 1:  # this thread is queued before the next starts
                assert time.monotonic() < deadline, "claim thread never queued"
                time.sleep(0.001)
    for t in threads:
        t.join(10)
    assert rows(tmp_path) == uids


def test_lock_held_by_current_thread_is_per_thread(tracker):
    seen = []
    with tracker._locked("test"):
        assert tracker.lock_held_by_current_thread()
        t = threading.Thread(target=lambda: seen.append(tracker.lock_held_by_current_thread()))
        t.start()
        t.join()
    assert seen == [False]
    assert not tracker.lock_held_by_current_thread()


def test_placement_ratio_is_used_when_none_is_configured(tracker):
    tracker.set_placement_ratios({VCPU: 1.0})
    assert tracker.snapshot().inventories[VCPU].capacity == 4
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.instance_claim(str(uuid.uuid4()), Flavor(5, 64))


def test_placement_ratios_survive_a_restart(tmp_path):
    """Restarted while Placement is down, the agent must not fall back to the
    initial ratios (4.0) and grant what Placement's ratio (1.0) forbids."""
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    tracker.set_placement_ratios({VCPU: 1.0})
    store.close()

    again, store2 = make_tracker(tmp_path)
    again.update_host(HOST)  # no sync: Placement is unreachable
    assert again.snapshot().inventories[VCPU].capacity == 4
    again.instance_claim(str(uuid.uuid4()), Flavor(4, 64))
    with pytest.raises(errors.ComputeResourcesUnavailable):
        again.instance_claim(str(uuid.uuid4()), Flavor(1, 64))
    store2.close()


def test_untracked_running_domains_count_as_used_by_default(tmp_path):
    from rtagent.virt.host import DOMAIN_RUNNING, DomainInfo

    squatter = DomainInfo(str(uuid.uuid4()), "by-hand", DOMAIN_RUNNING, 13, 1024)
    host = dataclasses.replace(HOST, domains=(squatter,))
    tracker, store = make_tracker(tmp_path)
    snap = tracker.update_host(host)
    assert [d.uuid for d in snap.drift.untracked] == [squatter.uuid]
    assert snap.usage[VCPU] == 13
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.instance_claim(str(uuid.uuid4()), Flavor(4, 64))  # 16 - 13 < 4
    store.close()

    counted_out, store2 = make_tracker(tmp_path, count_untracked=False)
    counted_out.update_host(host)
    counted_out.instance_claim(str(uuid.uuid4()), Flavor(4, 64))
    store2.close()


def test_claims_wait_for_an_unavailable_host(tracker):
    tracker.mark_host_unavailable("libvirt connection lost")
    with pytest.raises(errors.HostUnavailable, match="libvirt connection lost"):
        tracker.instance_claim(str(uuid.uuid4()), SMALL)
    assert tracker.snapshot().unavailable == "libvirt connection lost"
    tracker.update_host(HOST)
    tracker.instance_claim(str(uuid.uuid4()), SMALL)


def test_moves_and_assigned_resources_survive_a_restart(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    tracker.set_offered_resources({"CUSTOM_VGPU": ["g0", "g1", "g2"]})
    here = str(uuid.uuid4())
    tracker.instance_claim(here, SMALL, assigned={"CUSTOM_VGPU": 1})
    other = str(uuid.uuid4())
    tracker.start_move(
        str(uuid.uuid4()),
        here,
        "resize",
        source_node=tracker.node_uuid,
        dest_node=tracker.node_uuid,
        old_flavor=SMALL,
        new_flavor=Flavor(2, 1024, 20),
        assigned={"CUSTOM_VGPU": 1},
    )
    incoming = str(uuid.uuid4())
    tracker.start_move(
        incoming,
        other,
        "migration",
        source_node=str(uuid.uuid4()),
        dest_node=tracker.node_uuid,
        old_flavor=SMALL,
    )
    before = tracker.snapshot()
    store.close()

    again, store2 = make_tracker(tmp_path)
    again.set_offered_resources({"CUSTOM_VGPU": ["g0", "g1", "g2"]})
    after = again.update_host(HOST)
    assert after.instances == before.instances
    assert after.migrations == before.migrations
    assert dict(after.usage) == dict(before.usage)
    assert after.instances[0].assigned == {"CUSTOM_VGPU": ("g0",)}
    # the same-node resize holds g0 and g1; only g2 is free
    with pytest.raises(errors.ComputeResourcesUnavailable):
        again.instance_claim(str(uuid.uuid4()), SMALL, assigned={"CUSTOM_VGPU": 2})
    assert again.finish_move(incoming) is True
    finished = again.snapshot()
    assert again.finish_move(incoming) is True  # a retry changes nothing
    assert again.snapshot() == finished
    assert again.confirm_move(incoming) is True
    assert again.confirm_move(incoming) is False  # the move is over
    store2.close()


def test_refused_move_changes_neither_memory_nor_store(tracker, tmp_path):
    tracker.instance_claim(str(uuid.uuid4()), Flavor(3, 3000, 10))
    before, stored = tracker.snapshot(), rows(tmp_path)
    with pytest.raises(errors.ComputeResourcesUnavailable):
        tracker.start_move(
            str(uuid.uuid4()),
            str(uuid.uuid4()),
            "resize",
            source_node=str(uuid.uuid4()),
            dest_node=tracker.node_uuid,
            old_flavor=SMALL,
            new_flavor=Flavor(2, 2048, 10),
        )
    assert tracker.snapshot() == before
    assert rows(tmp_path) == stored


def test_claims_and_audits_are_served_in_arrival_order(tracker):
    """Claims and audits queued behind the lock are served first come, first
    served: neither kind overtakes or starves the other."""
    pending = tracker._lock._pending_writers
    arrivals, threads = [], []
    tiny = Flavor(vcpus=1, memory_mb=64, root_gb=1)
    with tracker._locked("test"):
        for i in range(16):
            if i % 3 == 0:
                target, args, key = tracker.update_host, (HOST,), None
            else:
                uid = str(uuid.uuid4())
                target, args, key = tracker.instance_claim, (uid, tiny), uid
            arrivals.append(("update_host" if key is None else "instance_claim", key))
            t = threading.Thread(target=target, args=args)
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 5
            while len(pending) < i + 1:
                assert time.monotonic() < deadline, "thread never queued"
                time.sleep(0.001)
    for t in threads:
        t.join(10)
    served = [(op, key) for _, op, key in tracker.recent_operations()]
    served = served[served.index(("test", None)) + 1 :]
    assert served[: len(arrivals)] == arrivals


def test_released_consumers_are_remembered_until_healed(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    gone, back, kept = (str(uuid.uuid4()) for _ in range(3))
    for uid in (gone, back, kept):
        tracker.instance_claim(uid, SMALL)
    tracker.abort_instance_claim(gone)
    tracker.update_instance(back, vm_state="deleted")
    tracker.instance_claim(back, SMALL)  # it came back: not released any more
    assert tracker.snapshot().released == {gone}
    store.close()

    again, store2 = make_tracker(tmp_path)
    assert again.snapshot().released == {gone}
    again.forget_released([gone])
    assert again.snapshot().released == frozenset()
    store2.close()
    third, store3 = make_tracker(tmp_path)
    assert third.snapshot().released == frozenset()
    store3.close()


def test_disabled_state_survives_a_restart(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.set_disabled("maintenance window")
    store.close()
    again, store2 = make_tracker(tmp_path)
    assert again.snapshot().disabled == "maintenance window"
    again.set_disabled(None)
    store2.close()
    third, store3 = make_tracker(tmp_path)
    assert third.snapshot().disabled is None
    store3.close()


def test_a_reading_between_audits_builds_no_snapshot(tracker, monkeypatch):
    """nova's build reads the node after each claim (``take_reading``): it
    records the reading as an audit would, but builds no snapshot (which
    sorts and sums every instance), so filling a host stays linear."""
    from rtagent.tracker import tracker as tracker_module

    tracker.instance_claim(str(uuid.uuid4()), SMALL)
    built = []
    real = tracker_module.snapshot_of
    monkeypatch.setattr(tracker_module, "snapshot_of", lambda *args: built.append(1) or real(*args))
    tracker.take_reading(HOST)  # the new claim has no guest yet: drift notes it
    assert tracker.take_reading(HOST) is False  # the same again: nothing changed
    grown = dataclasses.replace(HOST, local_gb=200)
    assert tracker.take_reading(grown) is True
    assert tracker.take_reading(grown) is False
    assert built == []
    assert tracker.hypervisor_hostname == HOST.hypervisor_hostname
    # What the next reader sees is what an audit's reading would give.
    assert tracker.snapshot().host == grown
    assert tracker.update_host(grown) == tracker.snapshot()
