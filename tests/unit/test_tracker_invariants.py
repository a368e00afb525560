"""Issue 10 through the tracker's public API over a real store: a move never
oversubscribes the node (invariant 3), a reused migration UUID is refused,
readers never wait for the writers' lock, and the node's whole state
(disabled, Placement ratios, failed builds) survives a restart."""

import threading
import uuid

import pytest

from rtagent.tracker import errors
from rtagent.tracker.model import MEMORY_MB, Flavor
from tests.unit.helpers import HOST, make_tracker

OTHER_NODE = "99999999-9999-9999-9999-999999999999"
TINY = Flavor(1, 512)
HUGE = Flavor(1, 4000)  # HOST has 4096 MiB and nothing reserved here


@pytest.fixture
def tracker(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    yield tracker
    store.close()


def capacity(tracker):
    return tracker.snapshot().inventories[MEMORY_MB].capacity


def memory_used(tracker):
    return tracker.snapshot().usage[MEMORY_MB]


@pytest.mark.parametrize("dest", ["same node", "another node"])
def test_an_inflated_old_flavor_never_oversubscribes(tracker, dest):
    """Claim 512 MiB and a second instance of 3000 MiB; then move the first
    saying its old flavor is 4000 MiB. Whatever the tracker answers, the
    node never holds more than its capacity, at any step."""
    node = tracker.node_uuid
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    tracker.instance_claim(x, TINY)
    tracker.instance_claim(y, Flavor(1, 3000))
    mig = str(uuid.uuid4())
    dest_node = node if dest == "same node" else OTHER_NODE
    with pytest.raises(errors.InvalidClaimRequest, match="old_flavor"):
        tracker.start_move(
            mig,
            x,
            "resize",
            source_node=node,
            dest_node=dest_node,
            old_flavor=HUGE,
            new_flavor=HUGE if dest == "same node" else TINY,
        )
    for step in (tracker.finish_move, tracker.confirm_move):
        step(mig)
        assert memory_used(tracker) <= capacity(tracker)
    assert memory_used(tracker) == 3512


def test_a_reused_migration_uuid_for_another_instance_is_refused(tracker):
    node = tracker.node_uuid
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    tracker.instance_claim(x, TINY)
    tracker.instance_claim(y, TINY)
    mig = str(uuid.uuid4())
    move = dict(source_node=node, dest_node=node, old_flavor=TINY, new_flavor=Flavor(1, 1024))
    tracker.start_move(mig, x, "resize", **move)
    before = tracker.snapshot()
    with pytest.raises(errors.TrackerError) as info:
        tracker.start_move(mig, y, "resize", **move)
    assert info.value.code == "tracker.move_conflict"
    with pytest.raises(errors.TrackerError):
        tracker.start_move(mig, x, "resize", **dict(move, new_flavor=Flavor(1, 2048)))
    assert tracker.snapshot() == before
    assert tracker.start_move(mig, x, "resize", **move)  # the same start: harmless


def test_readers_do_not_wait_for_a_writer(tracker):
    """A writer holding the lock (a slow durable write, say) does not block
    status, metrics or healing, which read the published state."""
    tracker.instance_claim(str(uuid.uuid4()), TINY)
    held, release = threading.Event(), threading.Event()

    def slow_writer():
        with tracker._locked("test"):
            held.set()
            release.wait(10)

    writer = threading.Thread(target=slow_writer)
    writer.start()
    try:
        assert held.wait(5)
        read = []
        reader = threading.Thread(target=lambda: read.append(tracker.snapshot()))
        reader.start()
        reader.join(2)
        assert read, "snapshot() waited for the writer's lock"
        assert len(read[0].instances) == 1
    finally:
        release.set()
        writer.join(5)


def test_the_whole_node_state_survives_a_restart(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    tracker.set_disabled("maintenance")
    tracker.set_placement_ratios({"VCPU": 2.0, "MEMORY_MB": 1.5, "DISK_GB": 1.0})
    tracker.build_failed()
    tracker.build_failed()
    store.close()
    again, store = make_tracker(tmp_path)
    snap = again.update_host(HOST)
    assert snap.disabled == "maintenance"
    assert snap.inventories[MEMORY_MB].allocation_ratio == 1.5
    assert snap.stats["failed_builds"] == "2"
    again.build_succeeded()
    again.set_disabled(None)
    store.close()
    third, store = make_tracker(tmp_path)
    snap = third.update_host(HOST)
    assert snap.disabled is None and snap.stats["failed_builds"] == "0"
    store.close()


def test_a_rollback_the_store_cannot_write_leaves_an_ordinary_claim(tmp_path):
    """Not a claim pending for ever (which would refuse every later call)."""
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    x = str(uuid.uuid4())
    claim = tracker.instance_claim(x, TINY, pending=True)
    with pytest.raises(errors.ClaimPending):
        tracker.instance_claim(x, TINY)
    store.close()  # every durable write fails from here on
    assert tracker.roll_back_pending(x, claim.token) is False
    assert tracker.instance_claim(x, TINY).created is False  # no write needed
    assert x in {i.uuid for i in tracker.snapshot().instances}
