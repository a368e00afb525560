"""nova's instance states on the tracker (RPC 1.8): carried by claims and
moves, changed by update_instance, durable, and counted in the stats."""

import uuid

import pytest

from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from tests.unit.helpers import HOST, make_tracker

SMALL = Flavor(vcpus=1, memory_mb=512, root_gb=10)


@pytest.fixture
def made(tmp_path):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(HOST)
    yield tracker, store
    store.close()


def held(tracker, instance_uuid):
    (found,) = [i for i in tracker.snapshot().instances if i.uuid == instance_uuid]
    return found.vm_state, found.task_state, found.os_type, found.project_id


def test_a_claim_carries_novas_states_and_they_survive_a_restart(made, tmp_path):
    tracker, store = made
    uid = str(uuid.uuid4())
    tracker.instance_claim(
        uid,
        SMALL,
        project_id="p1",
        states={"vm_state": "building", "task_state": "spawning", "os_type": "linux"},
    )
    assert held(tracker, uid) == ("building", "spawning", "linux", "p1")
    stats = tracker.snapshot().stats
    assert stats["num_os_type_linux"] == "1"
    assert stats["num_task_spawning"] == "1"
    store.close()
    again, store2 = make_tracker(tmp_path)
    again.update_host(HOST)
    assert held(again, uid) == ("building", "spawning", "linux", "p1")
    store2.close()


def test_a_claim_without_states_is_an_instance_being_built(made):
    tracker, _ = made
    uid = str(uuid.uuid4())
    tracker.instance_claim(uid, SMALL)
    assert held(tracker, uid) == ("building", None, None, "")


@pytest.mark.parametrize(
    "states",
    [
        {"vm_state": "deleted"},
        {"vm_state": "shelved_offloaded"},
        {"vm_state": "shelved_offloaded", "task_state": "unshelving"},
    ],
)
def test_a_claim_in_a_state_nova_frees_is_refused_and_changes_nothing(made, states):
    tracker, _ = made
    before = tracker.snapshot()
    with pytest.raises(errors.InvalidClaimRequest):
        tracker.instance_claim(str(uuid.uuid4()), SMALL, states=states)
    assert tracker.snapshot() == before


def test_an_unshelve_claims_a_shelved_offloaded_instance_spawning(made):
    tracker, _ = made
    uid = str(uuid.uuid4())
    states = {"vm_state": "shelved_offloaded", "task_state": "spawning"}
    tracker.instance_claim(uid, SMALL, states=states)
    assert held(tracker, uid)[:2] == ("shelved_offloaded", "spawning")
    # The same states sent again by the periodic keep it (nova's rule).
    tracker.update_instance(uid, vm_state="shelved_offloaded", task_state="spawning")
    assert held(tracker, uid)[:2] == ("shelved_offloaded", "spawning")
    # Offloaded again (its task over): released, as nova frees it.
    tracker.update_instance(uid, vm_state="shelved_offloaded", set_task=True)
    assert tracker.snapshot().instances == ()


def test_update_instance_sets_os_type_and_project_and_writes_only_a_change(made):
    tracker, store = made
    uid = str(uuid.uuid4())
    tracker.instance_claim(uid, SMALL, project_id="p1", states={"vm_state": "active"})
    tracker.update_instance(uid, others={"os_type": "windows", "project_id": "p2"})
    assert held(tracker, uid) == ("active", None, "windows", "p2")
    writes = []
    real = store.apply
    store.apply = lambda *args: writes.append(args) or real(*args)
    tracker.update_instance(
        uid, vm_state="active", set_task=True, others={"os_type": "windows", "project_id": "p2"}
    )
    assert writes == []
    tracker.update_instance(uid, others={"os_type": None})
    assert held(tracker, uid) == ("active", None, None, "p2")
    assert len(writes) == 1


@pytest.mark.parametrize(
    ("move_type", "landed"),
    [("resize", "resized"), ("migration", "resized"), ("live-migration", "stopped")],
)
def test_an_instance_lands_with_its_project_os_type_and_novas_vm_state(made, move_type, landed):
    tracker, _ = made
    uid, move = str(uuid.uuid4()), str(uuid.uuid4())
    tracker.start_move(
        move,
        uid,
        move_type,
        source_node=str(uuid.uuid4()),
        dest_node=tracker.node_uuid,
        old_flavor=SMALL,
        project_id="p9",
        states={"vm_state": "stopped", "task_state": "resize_prep", "os_type": "linux"},
    )
    tracker.finish_move(move)
    # Waiting for its confirmation, a resize is "resized" in nova; a live
    # migration keeps the vm_state it had; no task is under way.
    assert held(tracker, uid) == (landed, None, "linux", "p9")
