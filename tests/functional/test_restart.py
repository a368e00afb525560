"""Restarts over a real child process: one process acknowledges calls and is
killed with SIGKILL (or is refused and exits), a new process reopens the
state directory. Two nodes of one agent share one store; a lost store
beside an existing identity stops ``rtagent`` with one line."""

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from rtagent.testing.placement_server import PlacementServer
from rtagent.tracker import identity
from tests.functional.test_cli import RTAGENT, rtagent, write_conf

pytestmark = pytest.mark.functional

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE_V3 = os.path.join(TOP, "tests", "fixtures", "state_v3", "state")

X1, X2, Y = (f"00000000-0000-4000-8000-00000000000{n}" for n in (1, 2, 3))
M1, M2, M3 = (f"00000000-0000-4000-8000-00000000010{n}" for n in (1, 2, 3))

# Calls steps on both nodes as a conductor does, says "done", then waits
# to be killed: everything it did was acknowledged.
CONDUCTOR = textwrap.dedent(
    f"""
    import sys, time
    from rtagent.tracker.model import Flavor
    from tests.functional.test_crash import open_nodes

    (a, b), _, _ = open_nodes(sys.argv[1], 2)
    small = Flavor(1, 64, 1)

    def move(mig, inst, order):
        # start at the destination first (it claims), then the source
        for node in (b, a):
            node.start_move(mig, inst, "migration", source_node=a.node_uuid,
                            dest_node=b.node_uuid, old_flavor=small)
        for step in ("finish_move", "confirm_move")[:len(order)]:
            for node in order:
                getattr(node, step)(mig)

    for inst in ({X1!r}, {X2!r}, {Y!r}):
        a.instance_claim(inst, small)
    if sys.argv[2] == "moved":
        move({M1!r}, {X1!r}, (b, a))  # each step at the destination first
        move({M2!r}, {X2!r}, (a, b))  # each step at the source first
    else:
        move({M3!r}, {Y!r}, ())  # started on both nodes, no further
    print("done", flush=True)
    time.sleep(600)
    """
)

# Reopens the directory and prints what each node holds.
DUMP = textwrap.dedent(
    """
    import json, sys
    from tests.functional.test_crash import open_nodes

    trackers, snaps, store = open_nodes(sys.argv[1], 2)
    store.close()
    print(json.dumps([
        {
            "instances": [i.uuid for i in s.instances],
            "moves": {m.uuid: m.status for m in s.migrations},
            "vcpus": s.usage["VCPU"],
        }
        for s in snaps
    ]))
    """
)


def python(script, *args):
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=TOP,
    )


def kill_when_done(proc):
    try:
        line = proc.stdout.readline()
        assert line == "done\n", proc.communicate(timeout=10)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def reopen(state):
    proc = python(DUMP, state)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return json.loads(out)


def test_a_move_between_two_nodes_survives_a_restart(tmp_path):
    kill_when_done(python(CONDUCTOR, tmp_path, "moved"))
    a, b = reopen(tmp_path)
    # the moved instances are on the destination only, whatever the order
    # of the calls; nothing of the moves is left
    assert a == {"instances": [Y], "moves": {}, "vcpus": 1}
    assert b == {"instances": [X1, X2], "moves": {}, "vcpus": 2}


def test_a_move_started_on_both_nodes_survives_a_restart(tmp_path):
    kill_when_done(python(CONDUCTOR, tmp_path, "started"))
    a, b = reopen(tmp_path)
    # the source keeps the move (and so the instance until the move ends);
    # the destination keeps its claim for it
    assert a == {"instances": [X1, X2, Y], "moves": {M3: "pre-migrating"}, "vcpus": 3}
    assert b == {"instances": [], "moves": {M3: "pre-migrating"}, "vcpus": 1}


# -- a store lost beside an existing identity, through the rtagent command ----


@pytest.fixture
def placement_process():
    with PlacementServer(db_sync=False) as server:
        yield server


def one_line_refusal(result):
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def claim_three_then_lose_the_store(state, loss):
    """Three claims acknowledged by a process that is then killed; then
    the store is deleted or emptied. :returns: the store's path."""
    kill_when_done(python(CONDUCTOR, state, "started"))
    assert len(reopen(state)[0]["instances"]) == 3
    db = state / "rtagent.sqlite"
    if loss == "deleted":
        db.unlink()
    else:
        db.write_bytes(b"")
    return db


def test_a_lost_store_stops_the_agent_until_the_operator_accepts(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    db = claim_three_then_lose_the_store(tmp_path / "state", "deleted")

    line = one_line_refusal(rtagent("--config-file", str(conf), "audit"))
    assert line.startswith(f"rtagent: error: State store {db}: is missing or empty"), line
    assert "--accept-empty-state" in line and "docs/operations.md" in line
    assert db.stat().st_size == 0  # nothing was written
    run = subprocess.run(
        [RTAGENT, "--config-file", str(conf), "run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert one_line_refusal(run) == line  # the service stops the same way

    accepted = rtagent("--config-file", str(conf), "audit", "--accept-empty-state")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["instances"] == 0
    again = rtagent("--config-file", str(conf), "audit")  # the new store is the store now
    assert again.returncode == 0, again.stderr


def test_an_emptied_store_stops_the_agent(tmp_path):
    conf = write_conf(tmp_path)
    db = claim_three_then_lose_the_store(tmp_path / "state", "zero-length")
    line = one_line_refusal(rtagent("--config-file", str(conf), "audit"))
    assert f"State store {db}: is missing or empty" in line, line
    assert db.stat().st_size == 0


def test_a_lost_store_of_a_directory_written_by_schema_3_is_refused(tmp_path):
    # tests/fixtures/state_v3: written before the store had a marker
    conf = write_conf(tmp_path)
    state = tmp_path / "state"
    shutil.copytree(FIXTURE_V3, state)
    os.chmod(state, 0o700)
    (state / "rtagent.sqlite").unlink()
    line = one_line_refusal(rtagent("--config-file", str(conf), "audit"))
    assert "rtagent.lock and compute_id show rtagent ran here" in line, line


def test_first_start_beside_novas_compute_id_keeps_novas_provider(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    nova_uuid = "5a5a5a5a-0000-4000-8000-000000000005"
    (state / "compute_id").write_text(nova_uuid + "\n")
    result = rtagent("--config-file", str(conf), "audit")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["node_uuid"] == nova_uuid
    assert (state / identity.STORE_FILE_NAME).exists()


# -- a crash in the middle of the migration ------------------------------------

OPEN = textwrap.dedent(
    """
    import sys, time
    from rtagent.tracker.store import Store

    print("opening", flush=True)
    Store(sys.argv[1])
    print("opened", flush=True)
    time.sleep(600)
    """
)


def big_v3_store(path, rows):
    """The v3 fixture plus ``rows`` more instances, so that migrating it
    takes long enough to be killed in the middle."""
    shutil.copytree(FIXTURE_V3, path)
    db = sqlite3.connect(path / "rtagent.sqlite")
    body = db.execute("SELECT body FROM instances LIMIT 1").fetchone()[0]
    db.executemany(
        "INSERT INTO instances (uuid, node_uuid, body) VALUES (?, 'n', ?)",
        ((f"extra-{i}", body) for i in range(rows)),
    )
    db.commit()
    db.close()


def read_raw(path):
    """(schema version, tables, instance rows) as SQLite reads them."""
    db = sqlite3.connect(path / "rtagent.sqlite")
    try:
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        rows = db.execute("SELECT count(*) FROM instances").fetchone()[0]
        return version, tables, rows
    finally:
        db.close()


def open_store(state, kill_after=None):
    """Open the store in a child process; SIGKILL it ``kill_after`` seconds
    into the open. :returns: how long the open took (None if killed)."""
    proc = python(OPEN, state)
    try:
        assert proc.stdout.readline() == "opening\n", proc.communicate(timeout=10)
        started = time.monotonic()
        if kill_after is not None:
            time.sleep(kill_after)
            return None
        assert proc.stdout.readline() == "opened\n", proc.communicate(timeout=10)
        return time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


def test_a_crash_during_the_migration_leaves_version_3_intact(tmp_path):
    source = tmp_path / "source"
    big_v3_store(source, rows=20000)
    before = read_raw(source)
    assert before[0] == "3"
    shutil.copytree(source, tmp_path / "whole")
    took = open_store(tmp_path / "whole")
    after = read_raw(tmp_path / "whole")
    assert (after[0], after[2]) == ("6", before[2])
    assert after[1] == {"meta", "instances", "migrations", "released"}

    interrupted = 0
    for attempt, fraction in enumerate((0.5, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 0.1, 0.9)):
        state = tmp_path / f"killed{attempt}"
        shutil.copytree(source, state)
        open_store(state, kill_after=took * fraction)
        wal = state / "rtagent.sqlite-wal"
        wrote = wal.exists() and wal.stat().st_size > 0
        found = read_raw(state)
        if found[0] == "3":
            # untouched, whatever the migration had already written
            assert found == before
            interrupted += wrote
            if interrupted:
                break
        else:
            assert found == after  # killed after the commit: all of it
    assert interrupted, "no kill landed inside the migration's transaction"
