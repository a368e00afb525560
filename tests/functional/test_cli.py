"""The ``rtagent`` command as an operator runs it: a real subprocess, a real
Placement process over HTTP on loopback, the libvirt test driver."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.ports import free_port
from tests.functional.conftest import DEMO_URI

pytestmark = pytest.mark.functional

RTAGENT = os.path.join(os.path.dirname(sys.executable), "rtagent")


@pytest.fixture
def placement_process():
    # One per test: every agent here registers the same hypervisor hostname,
    # which Placement rightly refuses for a second node UUID.
    with PlacementServer(db_sync=False) as server:
        yield server


def write_conf(tmp_path, endpoint="http://127.0.0.1:9", extra=""):
    (tmp_path / "instances").mkdir(exist_ok=True)
    # A `run` serves /healthz: on a port of its own, not the default one
    # that anything else on the machine (another test's agent) may hold.
    if "[health]" not in extra:
        extra = f"{extra}\n[health]\nport = {free_port()}\n"
    path = tmp_path / "rtagent.conf"
    path.write_text(
        f"""[DEFAULT]
state_path = {tmp_path}/state
reserved_host_memory_mb = 1024
cpu_allocation_ratio = 2.0
[libvirt]
connection_uri = {DEMO_URI}
instances_path = {tmp_path}/instances
[placement]
auth_type = admin_token
endpoint = {endpoint}
token = admin
[rtagent]
audit_interval = 1
{extra}"""
    )
    return path


def rtagent(*args, timeout=60):
    return subprocess.run(
        [RTAGENT, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            "[DEFAULT]\ncpu_allocation_ratio = -1.0\n",
            "[DEFAULT] cpu_allocation_ratio: invalid value",
        ),
        ("[libvirt]\nconnection_uri = qemu//system\n", "[libvirt] connection_uri:"),
        ("[DEFAULT]\nstate_path = /etc/hostname\n", "[DEFAULT] state_path: /etc/hostname: exists"),
        ("[libvirt]\ninstances_path = /etc/hostname/x\n", "[libvirt] instances_path:"),
        ("[libvirt]\ninstances_path = /nonexistent/instances\n", "is not an existing directory"),
        ("[placement]\nauth_type = bogus\n", "[placement] auth_type:"),
        ("[placement]\nauth_type = password\n", "[placement] auth_url"),
        ("[placement]\ntimeout = abc\n", "[placement] timeout: invalid value"),
        ("[rtagent]\naudit_interval = soon\n", "[rtagent] audit_interval: invalid value"),
        ("this is not ini\n", "Failed to parse"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(tmp_path, extra, message):
    # later sections override earlier ones for the same option
    result = rtagent("--config-file", str(write_conf(tmp_path, extra=extra)), "audit")
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtagent: error: ")
    assert message in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "state" / "rtagent.sqlite"), "nothing was written"


def test_missing_auth_type_is_a_config_error(tmp_path):
    conf = write_conf(tmp_path)
    conf.write_text(conf.read_text().replace("auth_type = admin_token\n", ""))
    result = rtagent("--config-file", str(conf), "audit")
    assert result.returncode == 2
    assert "[placement] auth_type: is not set" in result.stderr


def test_unwritable_log_file_is_one_line(tmp_path):
    conf = write_conf(tmp_path)
    result = rtagent("--config-file", str(conf), "--log-file", "/nonexistent/x.log", "audit")
    assert result.returncode == 2
    assert result.stderr.startswith("rtagent: error: cannot set up logging")
    assert "Traceback" not in result.stderr


def test_second_agent_on_the_same_state_path_is_refused(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    first = subprocess.Popen([RTAGENT, "--config-file", str(conf), "run"], stderr=subprocess.PIPE)
    try:
        lock = tmp_path / "state" / "rtagent.lock"
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.1)
        result = rtagent("--config-file", str(conf), "audit")
        assert first.poll() is None, "the first agent stopped before the second was refused"
        assert result.returncode == 2
        assert f"in use by another rtagent process (pid {first.pid})" in result.stderr
    finally:
        first.terminate()
        first.communicate(timeout=10)


def test_unusable_identity_file_is_one_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "compute_id").write_text("garbage")
    result = rtagent("--config-file", str(write_conf(tmp_path)), "audit")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "compute_id: does not hold a UUID" in result.stderr


def test_audit_publishes_to_a_real_placement_process(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    result = rtagent("--config-file", str(conf), "audit")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    node = report["node_uuid"]
    assert (tmp_path / "state" / "compute_id").read_text().strip() == node

    adapter = placement_process.admin_adapter()
    invs = adapter.get(f"/resource_providers/{node}/inventories").json()["inventories"]
    assert invs["VCPU"]["allocation_ratio"] == 2.0
    # reserved_host_memory_mb and the demo host's guests that have no claim
    assert invs["MEMORY_MB"]["reserved"] == 1024 + 7168
    assert invs["MEMORY_MB"]["total"] == 32768
    # a second run reuses the identity and has nothing to write
    again = json.loads(rtagent("--config-file", str(conf), "audit").stdout)
    assert again["node_uuid"] == node
    assert again["placement_operations"] == []


def test_run_stops_on_sigterm_with_exit_0(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    proc = subprocess.Popen(
        [RTAGENT, "--config-file", str(conf), "run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        node_file = tmp_path / "state" / "compute_id"
        adapter = placement_process.admin_adapter()
        while True:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the agent never registered its node"
            if node_file.exists():
                node = node_file.read_text().strip()
                if adapter.get(f"/resource_providers/{node}").status_code == 200:
                    break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        # A graceful exit, with status 0; the timeout only catches a hang
        # (about a second idle, 5.6 s seen on a loaded machine).
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_bad_provider_config_file_is_one_line_and_nothing_is_written(tmp_path):
    configs = tmp_path / "provider_config"
    configs.mkdir()
    (configs / "broken.yaml").write_text("meta: {schema_version: '1.0'}\nproviders: [{}]\n")
    conf = write_conf(tmp_path, extra=f"[compute]\nprovider_config_location = {configs}\n")
    result = rtagent("--config-file", str(conf), "audit")
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "broken.yaml" in lines[0], result.stderr
    assert not (tmp_path / "state").exists()


def test_audit_dry_run_shows_the_tree_and_the_diff_and_writes_nothing(tmp_path, placement_process):
    conf = write_conf(tmp_path, endpoint=placement_process.endpoint)
    result = rtagent("--config-file", str(conf), "audit", "--dry-run")
    assert result.returncode == 0, result.stderr
    (node,) = json.loads(result.stdout)
    assert [op["op"] for op in node["operations"]] == [
        "CreateProvider",
        "SetTraits",
        "SetInventories",
    ]
    assert node["desired"][0]["inventories"]["VCPU"]["allocation_ratio"] == 2.0
    adapter = placement_process.admin_adapter()
    assert adapter.get(f"/resource_providers/{node['node_uuid']}").status_code == 404
    assert rtagent("--config-file", str(conf), "audit").returncode == 0
    again = json.loads(rtagent("--config-file", str(conf), "audit", "--dry-run").stdout)
    assert again[0]["operations"] == []
