"""``rtagent audit --dry-run`` writes nothing (no state directory, no
identity, no SQLite side files) and works beside a running agent (it takes
no lock); a real subprocess against a real Placement process."""

import json
import os
import subprocess
import time

import pytest

from rtagent.testing.placement_server import PlacementServer
from tests.functional.test_cli import RTAGENT, rtagent, write_conf

pytestmark = pytest.mark.functional


@pytest.fixture
def placement_process():
    with PlacementServer(db_sync=False) as server:
        yield server


def listing(directory):
    """{name: (size, mtime_ns, mode)} of every entry, to compare before/after."""
    return {
        entry.name: (st.st_size, st.st_mtime_ns, st.st_mode)
        for entry in os.scandir(directory)
        for st in [entry.stat(follow_symlinks=False)]
    }


def dry_run(conf):
    result = rtagent("--config-file", str(conf), "audit", "--dry-run")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_first_dry_run_creates_no_state_directory(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    (node,) = dry_run(conf)
    assert not (tmp_path / "state").exists()
    assert node["operations"][0]["op"] == "CreateProvider"


def test_a_dry_run_changes_no_file_of_a_stopped_agent(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    audit = rtagent("--config-file", str(conf), "audit")
    assert audit.returncode == 0, audit.stderr
    node_uuid = json.loads(audit.stdout)["node_uuid"]
    state = tmp_path / "state"
    before = listing(state)
    (node,) = dry_run(conf)
    assert node["node_uuid"] == node_uuid
    assert node["operations"] == []
    assert listing(state) == before, "no file created, removed or written"


def test_a_lost_store_is_refused_as_the_audit_refuses_it(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    assert rtagent("--config-file", str(conf), "audit").returncode == 0
    (tmp_path / "state" / "rtagent.sqlite").unlink()
    result = rtagent("--config-file", str(conf), "audit", "--dry-run")
    assert result.returncode == 2
    assert "is missing or empty, but store" in result.stderr
    assert not (tmp_path / "state" / "rtagent.sqlite").exists()


def test_a_dry_run_beside_a_running_agent(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    agent = subprocess.Popen(
        [RTAGENT, "--config-file", str(conf), "run"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        state = tmp_path / "state"
        adapter = placement_process.admin_adapter()
        deadline = time.monotonic() + 60
        while True:
            assert agent.poll() is None, agent.communicate()
            assert time.monotonic() < deadline, "the agent never registered its node"
            node_file = state / "compute_id"
            if node_file.exists():
                node_uuid = node_file.read_text().strip()
                if adapter.get(f"/resource_providers/{node_uuid}").status_code == 200:
                    break
            time.sleep(0.2)
        lock_before = (state / "rtagent.lock").read_text()
        (node,) = dry_run(conf)
        assert node["node_uuid"] == node_uuid
        assert node["operations"] == [], "the agent has synced: nothing to do"
        assert (state / "rtagent.lock").read_text() == lock_before == str(agent.pid)
        assert agent.poll() is None, "the agent still runs"
    finally:
        agent.terminate()
        agent.communicate(timeout=30)
    assert agent.returncode == 0
