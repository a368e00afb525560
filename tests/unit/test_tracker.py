"""The tracker over a real SQLite store: claims, refusals, restart, fairness."""

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
    assert tracker.instance_claim(uid.upper(), SMALL) == first
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
