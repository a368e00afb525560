"""The durable store and the node identity file, on a real filesystem."""

import os
import stat
import uuid

import pytest

from rtagent.tracker import errors, identity
from rtagent.tracker.model import DISK_GB, VCPU, Flavor, Instance, frozen_map
from rtagent.tracker.store import Store
from rtagent.tracker.writes import Changes


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_store_files_are_owner_only(tmp_path):
    state = tmp_path / "state"
    store = Store(str(state))
    store.put_instance("n", Instance(str(uuid.uuid4()), Flavor(1, 64), frozen_map({VCPU: 1})))
    assert mode(state) == 0o700
    names = sorted(os.listdir(state))
    assert "rtagent.sqlite" in names
    for name in names:
        assert mode(state / name) == 0o600, name
    store.close()


def test_store_round_trips_instances_per_node(tmp_path):
    store = Store(str(tmp_path))
    a = Instance(str(uuid.uuid4()), Flavor(2, 128, 1), frozen_map({VCPU: 2, DISK_GB: 1}), True)
    store.put_instance("node-a", a)
    store.put_instance("node-b", Instance(str(uuid.uuid4()), Flavor(1, 64), frozen_map({VCPU: 1})))
    store.close()
    reopened = Store(str(tmp_path))
    assert reopened.load_instances("node-a") == [a]
    reopened.delete_instance("node-a", a.uuid)
    assert reopened.load_instances("node-a") == []
    reopened.close()


def test_rows_are_keyed_by_node_and_uuid(tmp_path):
    # A move between two nodes of one agent holds the instance, the move and
    # (after it) the released consumer on both nodes at once.
    inst = Instance(str(uuid.uuid4()), Flavor(1, 64), frozen_map({VCPU: 1}))
    store = Store(str(tmp_path))
    for node in ("node-a", "node-b"):
        store.apply(node, Changes(put_instances=(inst,), put_released=(inst.uuid,)))
    store.apply("node-a", Changes(delete_instances=(inst.uuid,)))
    store.apply("node-b", Changes(delete_released=(inst.uuid,)))
    store.close()
    reopened = Store(str(tmp_path))
    assert reopened.load_instances("node-a") == []
    assert reopened.load_instances("node-b") == [inst]
    assert reopened.load_released("node-a") == {inst.uuid}
    assert reopened.load_released("node-b") == frozenset()
    reopened.close()


def test_apply_writes_metadata_in_the_same_transaction(tmp_path):
    store = Store(str(tmp_path))
    store.set_meta("gone", "soon")
    inst = Instance(str(uuid.uuid4()), Flavor(1, 64), frozen_map({VCPU: 1}))
    store.apply("n", Changes(put_instances=(inst,), meta=(("k", "v"), ("gone", None))))
    assert (store.get_meta("k"), store.get_meta("gone")) == ("v", None)
    # a failed transaction writes none of it
    with pytest.raises(errors.StateError):
        store.apply("n", Changes(put_instances=(inst,), meta=(("k", "w"), ("x", 1j))))
    assert store.get_meta("k") == "v"
    store.close()


def test_store_refuses_a_newer_schema(tmp_path):
    store = Store(str(tmp_path))
    store.set_meta("schema_version", "99")
    store.close()
    with pytest.raises(errors.StateError, match="newer"):
        Store(str(tmp_path))


def test_store_on_a_file_is_a_state_error(tmp_path):
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(errors.StateError):
        Store(str(path))


def test_identity_is_created_once_and_kept(tmp_path):
    store = Store(str(tmp_path))
    first = identity.load_or_create(str(tmp_path), store)
    assert identity.load_or_create(str(tmp_path), store, new_uuid=uuid.uuid4()) == first
    assert (tmp_path / "compute_id").read_text().strip() == first
    assert mode(tmp_path / "compute_id") == 0o600


def test_lost_identity_file_is_restored_from_the_store(tmp_path):
    store = Store(str(tmp_path))
    first = identity.load_or_create(str(tmp_path), store)
    os.unlink(tmp_path / "compute_id")
    assert identity.load_or_create(str(tmp_path), store) == first
    assert (tmp_path / "compute_id").read_text().strip() == first


def test_identity_file_from_nova_is_adopted(tmp_path):
    nova_uuid = str(uuid.uuid4())
    (tmp_path / "compute_id").write_text(nova_uuid.upper() + "\n")
    store = Store(str(tmp_path))
    assert identity.load_or_create(str(tmp_path), store) == nova_uuid


@pytest.mark.parametrize("content", ["not-a-uuid", "", "\x00\x01"])
def test_malformed_identity_file_stops_with_instructions(tmp_path, content):
    (tmp_path / "compute_id").write_text(content)
    store = Store(str(tmp_path))
    with pytest.raises(errors.NodeIdentityError, match="compute_id"):
        identity.load_or_create(str(tmp_path), store)
    # nothing was replaced
    assert (tmp_path / "compute_id").read_text() == content


def test_identity_file_disagreeing_with_store_is_refused(tmp_path):
    store = Store(str(tmp_path))
    identity.load_or_create(str(tmp_path), store)
    other = str(uuid.uuid4())
    (tmp_path / "compute_id").write_text(other)
    with pytest.raises(errors.NodeIdentityError, match="rtagent will not pick one"):
        identity.load_or_create(str(tmp_path), store)
    assert (tmp_path / "compute_id").read_text() == other


def test_store_commits_are_fsynced_wal(tmp_path):
    store = Store(str(tmp_path))
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_existing_state_dir_keeps_its_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    Store(str(shared)).close()
    assert mode(shared) == 0o755


def test_world_writable_state_dir_is_refused(tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    with pytest.raises(errors.StateError, match="world-writable"):
        Store(str(open_dir))
    assert not (open_dir / "rtagent.sqlite").exists()


def test_a_second_store_on_the_same_state_path_is_refused(tmp_path):
    first = Store(str(tmp_path))
    with pytest.raises(errors.StateError, match=f"another rtagent process \\(pid {os.getpid()}\\)"):
        Store(str(tmp_path))
    first.close()
    Store(str(tmp_path)).close()  # released on close


# -- a store lost beside an existing identity ---------------------------------


def claim_three(state):
    store = Store(str(state))
    node = identity.load_or_create(str(state), store)
    for _ in range(3):
        store.put_instance(node, Instance(str(uuid.uuid4()), Flavor(1, 64), frozen_map({VCPU: 1})))
    store.close()
    return node


def test_a_new_store_is_marked_beside_it(tmp_path):
    store = Store(str(tmp_path))
    marker = tmp_path / identity.STORE_FILE_NAME
    assert marker.read_text().strip() == store.get_meta("store_id")
    assert mode(marker) == 0o600
    store.close()


def test_first_start_beside_novas_compute_id_is_allowed(tmp_path):
    # nova's file, no rtagent file yet: the documented first start
    nova_uuid = str(uuid.uuid4())
    (tmp_path / "compute_id").write_text(nova_uuid + "\n")
    store = Store(str(tmp_path))
    assert identity.load_or_create(str(tmp_path), store) == nova_uuid
    assert (tmp_path / identity.STORE_FILE_NAME).exists()
    store.close()


@pytest.mark.parametrize("loss", ["deleted", "zero-length"])
def test_a_lost_store_beside_its_marker_is_refused(tmp_path, loss):
    claim_three(tmp_path)
    db = tmp_path / "rtagent.sqlite"
    if loss == "deleted":
        db.unlink()
    else:
        db.write_bytes(b"")
    with pytest.raises(errors.StateError, match="--accept-empty-state") as caught:
        Store(str(tmp_path))
    assert "is missing or empty" in str(caught.value)
    assert db.stat().st_size == 0  # nothing was written
    with pytest.raises(errors.StateError):  # and it stays refused
        Store(str(tmp_path))


def test_a_lost_store_of_an_rtagent_older_than_the_marker_is_refused(tmp_path):
    # schema 3 wrote no marker, but its lock file says rtagent ran here
    claim_three(tmp_path)
    os.unlink(tmp_path / identity.STORE_FILE_NAME)
    os.unlink(tmp_path / "rtagent.sqlite")
    with pytest.raises(errors.StateError, match=r"rtagent\.lock and compute_id show"):
        Store(str(tmp_path))


def test_accepting_an_empty_store_starts_empty_and_marks_it(tmp_path):
    node = claim_three(tmp_path)
    old_marker = (tmp_path / identity.STORE_FILE_NAME).read_text()
    os.unlink(tmp_path / "rtagent.sqlite")
    store = Store(str(tmp_path), accept_empty=True)
    assert identity.load_or_create(str(tmp_path), store) == node  # restored from the file
    assert store.load_instances(node) == []
    assert (tmp_path / identity.STORE_FILE_NAME).read_text() != old_marker
    store.close()
    Store(str(tmp_path)).close()  # the new store is this directory's store now


def test_a_marker_lost_beside_its_store_is_rewritten(tmp_path):
    claim_three(tmp_path)
    marker = tmp_path / identity.STORE_FILE_NAME
    expected = marker.read_text()
    marker.unlink()
    Store(str(tmp_path)).close()
    assert marker.read_text() == expected


def test_the_marker_is_never_written_through_a_symlink(tmp_path):
    # a planted link stops the start (tests/unit/test_state_dir.py has every name)
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    state = tmp_path / "state"
    state.mkdir()
    os.symlink(target, state / (identity.STORE_FILE_NAME + ".tmp"))
    with pytest.raises(errors.StateError, match=r"store_id\.tmp: is a symbolic link"):
        Store(str(state))
    assert target.read_text() == "keep"
    assert not os.path.lexists(state / identity.STORE_FILE_NAME)


def test_a_leftover_regular_tmp_file_is_replaced(tmp_path):
    # what a crash during write_atomically leaves behind
    (tmp_path / (identity.STORE_FILE_NAME + ".tmp")).write_text("half")
    store = Store(str(tmp_path))
    marker = (tmp_path / identity.STORE_FILE_NAME).read_text().strip()
    assert marker == store.get_meta("store_id")
    assert not (tmp_path / (identity.STORE_FILE_NAME + ".tmp")).exists()
    store.close()


def test_a_first_start_that_failed_before_its_store_existed_starts_again(tmp_path):
    """Only the lock file (and perhaps an empty database) is left: no
    compute_id was ever written, so no store with claims existed."""
    (tmp_path / "rtagent.lock").write_text("4242")
    (tmp_path / "rtagent.sqlite").write_bytes(b"")
    os.chmod(tmp_path, 0o700)
    store = Store(str(tmp_path))
    try:
        assert identity.read_store_marker(store.state_dir) is not None
    finally:
        store.close()
