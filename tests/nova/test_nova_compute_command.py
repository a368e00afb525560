"""``rtagent-nova-compute`` as production runs it: real processes side by
side, as systemd would start them.

A real RabbitMQ, a real Placement process, the rtagent daemon (``rtagent
run``, libvirt test driver), nova-conductor over SQLite databases made by
``nova-manage``, and ``rtagent-nova-compute`` (nova's compute service, its
fake virt driver with a stable node identity). The compute service must
register, find the agent over the broker, and write its ComputeNode record
from the agent's view; Placement must hold only what the agent wrote.

Run by ``make test-nova`` in .venv-nova.
"""

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest

from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.ports import free_port
from rtagent.testing.rabbitmq import RabbitMQ, missing_requirements
from tests.requirements import require

BIN = os.path.dirname(sys.executable)
HOST = "rtagent-nova-host"
DEMO_URI = "test:///default"
START_BOUND_S = 120
# nova's update_resources_interval here (nova's default: 60 s).
AUDIT_S = 2


def _command(name):
    return os.path.join(BIN, name)


class Service:
    """One subprocess, its output in a log file; stopped by its PID."""

    def __init__(self, name, argv, workdir):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self._log = open(self.log_path, "ab")  # closed by stop()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )

    def logs(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def _wait(predicate, what, services, timeout=START_BOUND_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for service in services:
            if service.proc.poll() is not None:
                raise AssertionError(
                    f"{service.name} exited {service.proc.returncode} while waiting for "
                    f"{what}:\n{service.logs()[-4000:]}"
                )
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    tails = "\n".join(f"--- {s.name}\n{s.logs()[-3000:]}" for s in services)
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


def _agent_conf(workdir, broker, placement, health_port):
    path = os.path.join(workdir, "rtagent.conf")
    os.makedirs(os.path.join(workdir, "instances"), exist_ok=True)
    with open(path, "w") as f:
        f.write(
            f"""[DEFAULT]
host = {HOST}
state_path = {workdir}/agent-state
transport_url = {broker.transport_url}
cpu_allocation_ratio = 3.0
reserved_host_memory_mb = 1024
compute_monitors = cpu.virt_driver
[libvirt]
connection_uri = {DEMO_URI}
instances_path = {workdir}/instances
[placement]
auth_type = admin_token
endpoint = {placement.endpoint}
token = admin
[rtagent]
audit_interval = 2
[daemon]
startup_delay = 0
[health]
port = {health_port}
"""
        )
    return path


def _nova_conf(workdir, broker, placement, agent_conf):
    path = os.path.join(workdir, "nova.conf")
    with open(path, "w") as f:
        f.write(
            f"""[DEFAULT]
host = {HOST}
state_path = {workdir}/nova-state
transport_url = {broker.transport_url}
compute_driver = fake.FakeDriverWithoutFakeNodes
update_resources_interval = {AUDIT_S}
# No random delay of up to a minute before nova's first periodics.
periodic_fuzzy_delay = 0
# Stopped within the test's bound, not after nova's one-minute default.
graceful_shutdown_timeout = 5
use_stderr = true
[database]
connection = sqlite:///{workdir}/nova.sqlite
[api_database]
connection = sqlite:///{workdir}/nova_api.sqlite
[oslo_concurrency]
lock_path = {workdir}/locks
[placement]
auth_type = admin_token
endpoint = {placement.endpoint}
token = admin
[conductor]
workers = 1
[oslo_messaging_notifications]
# Notifications as log lines, to read them back from the service's output.
driver = log
[notifications]
notification_format = both
[rtagent]
agent_config_file = {agent_conf}
rpc_timeout = 20
"""
        )
    return path


def _get_json(url):
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


def _compute_node_row(db_path, uuid):
    # Closed at once: sqlite3's context manager ends a transaction but keeps
    # the connection, and a reader's lock held meanwhile makes nova's
    # conductor fail its write with "database is locked" on a loaded machine.
    with contextlib.closing(sqlite3.connect(db_path)) as db:
        db.row_factory = sqlite3.Row
        row = db.execute(
            "SELECT * FROM compute_nodes WHERE uuid = ? AND deleted = 0", (uuid,)
        ).fetchone()
    return dict(row) if row is not None else None


@pytest.fixture
def workdir(tmp_path):
    # nova-manage and the services need short absolute paths of their own.
    yield str(tmp_path)


@pytest.mark.parametrize(
    "agent_file",
    [None, "[DEFAULT]\ntransport_url = rabit://guest:secret@127.0.0.1:5672/\n"],
    ids=["missing", "unknown-transport-driver"],
)
def test_a_wrong_agent_config_file_stops_the_service_on_one_line(workdir, agent_file):
    conf = os.path.join(workdir, "nova.conf")
    agent_conf = os.path.join(workdir, "rtagent.conf")
    if agent_file is not None:
        with open(agent_conf, "w") as f:
            f.write(agent_file)
    with open(conf, "w") as f:
        f.write(f"[DEFAULT]\nstate_path = {workdir}\n[rtagent]\nagent_config_file = {agent_conf}\n")
    result = subprocess.run(
        [_command("rtagent-nova-compute"), "--config-file", conf],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("rtagent-nova-compute: [rtagent] agent_config_file"), result.stderr
    assert agent_conf in last
    assert "Traceback" not in result.stderr
    assert "secret" not in result.stderr


class Stack:
    """RabbitMQ, Placement, the rtagent daemon and nova-conductor, with
    nova's databases made; :meth:`start_compute` adds the command."""

    def __init__(self, workdir, broker, placement):
        self.workdir = workdir
        self.placement = placement
        self.health = free_port()
        self.agent_conf = _agent_conf(workdir, broker, placement, self.health)
        self.nova_conf = _nova_conf(workdir, broker, placement, self.agent_conf)
        self.db = os.path.join(workdir, "nova.sqlite")
        self.services = []
        for what in ("api_db", "db"):
            subprocess.run(
                [_command("nova-manage"), "--config-file", self.nova_conf, what, "sync"],
                check=True,
                capture_output=True,
                timeout=300,
            )
        self.agent = self._start(
            "rtagent", [_command("rtagent"), "--config-file", self.agent_conf, "run"]
        )
        status = self.wait(lambda: _status(self.health), "the agent's first audit", timeout=60)
        self.node = status["nodes"][0]["node_uuid"]
        self._start("nova-conductor", [_command("nova-conductor"), "--config-file", self.nova_conf])

    def _start(self, name, argv):
        service = Service(name, argv, self.workdir)
        self.services.append(service)
        return service

    def start_compute(self, compute_id):
        """``rtagent-nova-compute`` with ``compute_id`` as nova's node identity."""
        os.makedirs(os.path.join(self.workdir, "nova-state"), exist_ok=True)
        with open(os.path.join(self.workdir, "nova-state", "compute_id"), "w") as f:
            f.write(compute_id)
        return self._start(
            "rtagent-nova-compute",
            [_command("rtagent-nova-compute"), "--config-file", self.nova_conf],
        )

    def wait(self, predicate, what, timeout=START_BOUND_S):
        return _wait(predicate, what, self.services, timeout)

    def stop(self):
        for service in reversed(self.services):
            service.stop()


@pytest.fixture
def stack(workdir):
    require(missing_requirements(), "RabbitMQ")
    with RabbitMQ(os.path.join(workdir, "rabbit")) as broker, PlacementServer() as placement:
        made = None
        try:
            made = Stack(workdir, broker, placement)
            yield made
        finally:
            if made is not None:
                made.stop()
    shutil.rmtree(os.path.join(workdir, "rabbit"), ignore_errors=True)


ACCOUNTED = ("cpu_allocation_ratio", "vcpus_used", "memory_mb_used", "running_vms", "metrics")


def test_nova_compute_runs_on_the_rtagent_daemon(stack):
    # The node identity the two services share (docs/nova.md).
    compute = stack.start_compute(stack.node)
    node = stack.node

    def written():
        # The record is created from the driver's facts, then the agent's
        # view is applied: wait for the second.
        row = _compute_node_row(stack.db, node)
        if row is None:
            return None
        view = _agent_view(stack.agent_conf, node)
        return (row, view) if all(_same(row, view, f) for f in ACCOUNTED) else None

    row, _view = stack.wait(written, "nova's ComputeNode record with the agent's accounting")
    assert row["host"] == HOST
    assert row["hypervisor_hostname"] == HOST
    # The accounting is the agent's: its ratio (3.0, neither nova's initial
    # 4.0 nor a ratio the fake driver sets) and its usage (the demo host's
    # guests without a claim, which nova's fake driver does not have).
    assert row["cpu_allocation_ratio"] == 3.0
    assert row["memory_mb_used"] > 1024
    # Host metrics from the daemon's compute_monitors, as nova stores them.
    metrics = json.loads(row["metrics"])
    assert {m["name"] for m in metrics} >= {"cpu.frequency", "cpu.user.time", "cpu.percent"}
    assert {m["source"] for m in metrics} == {"libvirt.LibvirtDriver"}

    providers = _get_json_admin(stack.placement, "/resource_providers")["resource_providers"]
    assert [p["uuid"] for p in providers] == [node]
    inventory = _get_json_admin(stack.placement, f"/resource_providers/{node}/inventories")
    assert inventory["inventories"]["VCPU"]["allocation_ratio"] == 3.0
    assert inventory["inventories"]["VCPU"]["total"] != 1000

    # Further audits go through the same path, at nova.conf's
    # update_resources_interval (nova reads it when its compute manager is
    # imported: after nova.conf is parsed, or never).
    calls_before = _rpc_calls(stack.health, "get_compute_node")
    stack.wait(
        lambda: _rpc_calls(stack.health, "get_compute_node") >= calls_before + 3,
        f"three more updates of the record, {AUDIT_S} s apart",
    )
    logs = compute.logs()
    assert "NovaTrackerUsed" not in logs
    assert "Error updating resources" not in logs, _from_first(logs, "Error updating resources")
    assert "Resource tracking by the rtagent daemon" in logs
    # nova's fake driver says 1000 vCPUs where the daemon reads the libvirt
    # test driver's host: said once, not at every periodic.
    mismatch = [line for line in logs.splitlines() if "report different sizes" in line]
    assert len(mismatch) == 1, mismatch
    assert "vcpus 1000/" in mismatch[0]
    # nova's metrics notifications, unversioned and versioned, as nova's
    # tracker sent them, from the agent's metrics.
    sent = [
        json.loads(line[line.index("{") :]) for line in logs.splitlines() if _notification(line)
    ]
    events = {n["event_type"]: n["payload"] for n in sent}
    legacy = events["compute.metrics.update"]
    assert legacy["nodename"] == HOST and legacy["host"] == HOST
    assert {m["name"] for m in legacy["metrics"]} >= {"cpu.frequency", "cpu.percent"}
    versioned = events["metrics.update"]["nova_object.data"]
    assert versioned["nodename"] == HOST


def test_a_compute_id_other_than_the_agents_is_said_on_one_line(stack):
    other = "0f0f0f0f-0000-4000-8000-000000000001"
    compute = stack.start_compute(other)
    said = f"The rtagent agent has no node {other}"
    stack.wait(lambda: compute.logs().count(said) >= 2, "the error at two periodics")
    logs = compute.logs()
    assert "Error updating resources" not in logs, _from_first(logs, "Error updating resources")
    line = next(line for line in logs.splitlines() if said in line)
    assert "compute_id" in line and "docs/nova.md" in line
    # Nothing of nova's own accounting reached Placement meanwhile.
    providers = _get_json_admin(stack.placement, "/resource_providers")["resource_providers"]
    assert [p["uuid"] for p in providers] == [stack.node]


def _from_first(logs, marker, lines=40):
    """The ERROR lines of ``logs`` from the first that holds ``marker``:
    the error and its traceback (oslo.log prefixes each traceback line
    with the level), which a log's tail would not show."""
    rows = logs.splitlines()
    start = next((i for i, row in enumerate(rows) if marker in row), 0)
    return "\n".join([row for row in rows[start:] if " ERROR " in row][:lines])


def _notification(line):
    return "oslo.messaging.notification." in line and "metrics.update" in line and "{" in line


def _same(row, view, field):
    if field == "metrics":
        # A new reading at every audit: the record holds one of them.
        return bool(json.loads(row["metrics"] or "[]"))
    return row[field] == view[field]


def _status(port):
    try:
        status = _get_json(f"http://127.0.0.1:{port}/status")
    except OSError:
        return None
    nodes = status.get("nodes") or []
    return status if nodes and nodes[0].get("node_uuid") else None


def _rpc_calls(port, method):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("rtagent_rpc_calls_total{") and f'method="{method}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _agent_view(agent_conf, node):
    """The agent's compute-node view, asked over the broker as any RPC
    client would (docs/rpc-api.md)."""
    from rtagent.nova.compute import agent_rpc_conf
    from rtagent.rpc.client import AgentClient
    from rtagent.rpc.transport import get_transport

    transport = get_transport(agent_rpc_conf(agent_conf))
    try:
        reply = AgentClient(transport, HOST, timeout=20).call("get_compute_node", node_uuid=node)
    finally:
        transport.cleanup()
    assert reply["ok"], reply
    return reply["result"]


def _get_json_admin(placement, path):
    return placement.admin_adapter().get(path).json()
