"""A state directory written by an older rtagent goes through the store's
migration on start: tests/fixtures/state_v3 was written by the code of
schema version 3 (rows keyed by UUID alone); see its README."""

import json
import os
import shutil
import sqlite3
import stat

import pytest

from rtagent.tracker import errors, identity
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Instance, Migration
from rtagent.tracker.store import SCHEMA_VERSION, Store
from rtagent.tracker.tracker import Tracker

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "state_v3", "state")
PRIMARY = "0a000000-0000-4000-8000-00000000000a"


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def v3_dir(tmp_path):
    """A copy of the fixture, with the modes the old code gave it (git
    keeps none)."""
    state = tmp_path / "state"
    shutil.copytree(FIXTURE, state)
    os.chmod(state, 0o700)
    for name in os.listdir(state):
        os.chmod(state / name, 0o600)
    return state


def raw_rows(state):
    """Every row of the store as SQLite holds it, read without rtagent."""
    db = sqlite3.connect(f"file:{state}/rtagent.sqlite?mode=ro", uri=True)
    try:
        return {
            "instances": sorted(db.execute("SELECT node_uuid, uuid, body FROM instances")),
            "migrations": sorted(db.execute("SELECT node_uuid, uuid, body FROM migrations")),
            "released": sorted(db.execute("SELECT node_uuid, uuid FROM released")),
            "meta": dict(db.execute("SELECT key, value FROM meta")),
        }
    finally:
        db.close()


def test_the_fixture_is_a_version_3_store_of_two_nodes(v3_dir):
    rows = raw_rows(v3_dir)
    assert rows["meta"]["schema_version"] == "3"
    assert {n for n, *_ in rows["instances"]} == {PRIMARY, rows["meta"]["node_uuid_for:node-b"]}
    assert (len(rows["instances"]), len(rows["migrations"]), len(rows["released"])) == (4, 3, 2)
    assert not (v3_dir / identity.STORE_FILE_NAME).exists()


def test_every_row_survives_the_migration(v3_dir):
    before = raw_rows(v3_dir)
    store = Store(str(v3_dir))
    try:
        assert store.get_meta("schema_version") == str(SCHEMA_VERSION) == "6"
        nodes = {n for n, *_ in before["instances"] + before["migrations"]}
        for node in nodes:
            assert store.load_instances(node) == sorted(
                (Instance.from_dict(json.loads(b)) for n, _, b in before["instances"] if n == node),
                key=lambda i: i.uuid,
            )
            assert store.load_migrations(node) == sorted(
                (
                    Migration.from_dict(json.loads(b))
                    for n, _, b in before["migrations"]
                    if n == node
                ),
                key=lambda m: m.uuid,
            )
            assert store.load_released(node) == {u for n, u in before["released"] if n == node}
        for key, value in before["meta"].items():
            if key != "schema_version":
                assert store.get_meta(key) == value, key
        assert identity.load_or_create(str(v3_dir), store) == PRIMARY
        store_id = store.get_meta("store_id")
        for name in os.listdir(v3_dir):  # the -wal and -shm files too
            assert mode(v3_dir / name) == 0o600, name
    finally:
        store.close()
    after = raw_rows(v3_dir)
    for table in ("instances", "migrations", "released"):
        assert after[table] == before[table], table  # the same rows, only re-keyed
    assert (v3_dir / identity.STORE_FILE_NAME).read_text().strip() == store_id
    for name in os.listdir(v3_dir):
        assert mode(v3_dir / name) == 0o600, name
    assert mode(v3_dir) == 0o700


def test_trackers_restore_what_the_old_agent_held(v3_dir):
    store = Store(str(v3_dir))
    try:
        second = store.get_meta("node_uuid_for:node-b")
        policy = ResourcePolicy(reserved_host_memory_mb=512)
        a = Tracker(PRIMARY, store, policy).snapshot()
        b = Tracker(second, store, policy).snapshot()
    finally:
        store.close()
    assert [i.uuid[-1] for i in a.instances] == ["1", "2", "4"]
    assert [m.uuid[-3:] for m in a.migrations] == ["101"]
    assert a.released == {"00000000-0000-4000-8000-000000000003"}
    assert a.disabled == "maintenance window"
    assert [i.uuid[-1] for i in b.instances] == ["5"]
    assert [(m.uuid[-3:], m.status) for m in b.migrations] == [
        ("102", "finished"),
        ("103", "pre-migrating"),
    ]
    assert b.released == {"00000000-0000-4000-8000-000000000007"}
    assert b.disabled is None


def test_a_migrated_store_opens_unchanged_again(v3_dir):
    Store(str(v3_dir)).close()
    first = raw_rows(v3_dir)
    Store(str(v3_dir)).close()
    assert raw_rows(v3_dir) == first


def test_a_store_of_version_1_gets_the_tables_it_lacked(tmp_path):
    db = sqlite3.connect(tmp_path / "rtagent.sqlite")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute(
        "CREATE TABLE instances ("
        " uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL, body TEXT NOT NULL)"
    )
    db.execute("INSERT INTO instances VALUES ('u', 'n', '{}')")
    db.commit()
    db.close()
    store = Store(str(tmp_path))
    assert store.get_meta("schema_version") == "6"
    assert store.load_migrations("n") == []
    assert store.load_released("n") == frozenset()
    store.close()
    assert raw_rows(tmp_path)["instances"] == [("n", "u", "{}")]


def test_a_store_newer_than_this_code_is_refused_untouched(v3_dir):
    db = sqlite3.connect(v3_dir / "rtagent.sqlite")
    db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    before = raw_rows(v3_dir)
    with pytest.raises(errors.StateError, match="schema version 7 is newer"):
        Store(str(v3_dir))
    assert raw_rows(v3_dir) == before


@pytest.mark.parametrize("old", ["4", "5"])
def test_a_version_4_or_5_store_becomes_6_with_every_row_kept(v3_dir, old):
    # A store as rtagent before NUMA claims (4) or before PCI claims (5)
    # left it: the tables of 4.
    Store(str(v3_dir)).close()
    db = sqlite3.connect(v3_dir / "rtagent.sqlite")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (old,))
    db.commit()
    db.close()
    before = raw_rows(v3_dir)
    store = Store(str(v3_dir))
    try:
        assert store.get_meta("schema_version") == "6"
    finally:
        store.close()
    after = raw_rows(v3_dir)
    assert after["meta"]["schema_version"] == "6"
    assert {k: v for k, v in after.items() if k != "meta"} == {
        k: v for k, v in before.items() if k != "meta"
    }


def test_rows_of_5_have_no_pci_devices_and_6_keeps_them():
    """A row written before PCI claims reads as holding none; one with
    devices reads back with them (the fields a downgrade would drop)."""
    from rtagent.pci.held import HeldDevice
    from rtagent.tracker.model import Flavor, frozen_map

    held = (HeldDevice("0000:3b:02.0", "r-1", "8086", "154c", "type-VF", 0, "0000:3b:00.0"),)
    instance = Instance("u", Flavor(1, 1), frozen_map({"VCPU": 1}), pci_devices=held)
    body = instance.to_dict()
    assert Instance.from_dict(body) == instance
    del body["pci_devices"]
    assert Instance.from_dict(body).pci_devices == ()
