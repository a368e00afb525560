"""The durable store and the node identity file, on a real filesystem."""

import os
import stat
import uuid

import pytest

from rtagent.tracker import errors, identity
from rtagent.tracker.model import DISK_GB, VCPU, Flavor, Instance, frozen_map
from rtagent.tracker.store import Store


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
    reopened.delete_instance(a.uuid)
    assert reopened.load_instances("node-a") == []
    reopened.close()


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
