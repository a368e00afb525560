"""``rtagent run`` as systemd runs it: a real subprocess with NOTIFY_SOCKET
(a real unix datagram socket) and WATCHDOG_USEC, a real RabbitMQ, a real
Placement process, the libvirt test driver; signals sent by PID."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rtagent.rpc.client import AgentClient
from rtagent.rpc.transport import get_transport
from rtagent.testing.ports import free_port
from tests.functional.rpc.harness import DEMO_URI, bounded_call, make_conf

pytestmark = pytest.mark.integration

RTAGENT = os.path.join(os.path.dirname(sys.executable), "rtagent")
# [daemon] shutdown_timeout below. A stop within it is judged by the
# agent's own account (it logs each step that outlived the timeout), not by
# wall time, which a loaded machine stretches.
SHUTDOWN_TIMEOUT_S = 15
# Only a hang guard: over 10 x what a stop takes here (2.8 s under a load
# of 10) and beyond shutdown_timeout plus its few seconds.
STOP_GUARD_S = 60
OUTLIVED = "did not finish within the shutdown timeout"


class Notifications:
    """A NOTIFY_SOCKET: the datagrams the agent sends, as dicts."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.received = []

    def wait_for(self, key, value=None, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for msg in self.received:
                if key in msg and (value is None or msg[key] == value):
                    return msg
            try:
                data = self.sock.recv(4096).decode()
            except TimeoutError:
                continue
            self.received.append(dict(line.split("=", 1) for line in data.splitlines()))
        raise AssertionError(f"no {key}={value} from the agent; got {self.received[-5:]}")

    def close(self):
        self.sock.close()


class Agent:
    """One ``rtagent run`` subprocess; stopped by PID at the end."""

    def __init__(self, tmp_path, broker, placement, extra=""):
        self.tmp = tmp_path
        self.port = free_port()
        self.conf_path = tmp_path / "rtagent.conf"
        self.write_conf(broker, placement, extra)
        self.notify = Notifications(str(tmp_path / "notify.sock"))
        self.log_path = tmp_path / "agent.log"
        self.proc = None
        self.broker = broker

    def write_conf(self, broker, placement, extra=""):
        (self.tmp / "instances").mkdir(exist_ok=True)
        self.conf_path.write_text(
            f"""[DEFAULT]
host = daemon-test
state_path = {self.tmp}/state
transport_url = {broker.transport_url}
reserved_host_memory_mb = 2048
cpu_allocation_ratio = 16.0
[libvirt]
connection_uri = {DEMO_URI}
instances_path = {self.tmp}/instances
[placement]
auth_type = admin_token
endpoint = {placement.endpoint}
token = admin
timeout = 2
[rtagent]
audit_interval = 1
# Every audit reads Placement: these tests watch how the daemon meets a
# Placement that fails (with the default interval an unchanged node meets
# it at its next due read: tests/functional/placement/test_refresh_interval.py).
placement_refresh_interval = 0
# A failed sync is retried within 5 s, not the default 110 s: these tests
# wait for the agent to see Placement back (the window: docs/placement-sync.md).
placement_retry_window = 5
[daemon]
startup_delay = 0.5
shutdown_timeout = {SHUTDOWN_TIMEOUT_S}
[health]
port = {self.port}
{extra}"""
        )

    def start(self, wait_ready=True):
        env = dict(os.environ, NOTIFY_SOCKET=self.notify.path, WATCHDOG_USEC="2000000")
        env.pop("WATCHDOG_PID", None)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [RTAGENT, "--config-file", str(self.conf_path), "run"],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        if wait_ready:
            # Only a hang guard: a start takes 2 to 3 s idle, and over 60 s
            # was seen while two test runs and benchmarks loaded the machine.
            self.notify.wait_for("READY", "1", timeout=180)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self.proc is not None:
            self.log.close()

    def logs(self):
        return self.log_path.read_text(errors="replace")

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def call(self, method, **args):
        transport = get_transport(make_conf(str(self.tmp / "client"), self.broker.transport_url))
        try:
            client = AgentClient(transport, "daemon-test", timeout=15)
            return bounded_call(client, 20, method, **args)
        finally:
            transport.cleanup()


@pytest.fixture
def run_agent(tmp_path, broker, placement):
    agents = []

    def make(extra=""):
        agent = Agent(tmp_path, broker, placement, extra)
        agents.append(agent)
        agent.start()
        return agent

    yield make
    for agent in agents:
        agent.stop()
        agent.notify.close()


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_notify_health_metrics_and_sigterm_keeps_claims(run_agent, tmp_path):
    agent = run_agent()
    agent.notify.wait_for("WATCHDOG", "1", timeout=10)
    status = agent.notify.wait_for("STATUS")
    assert "audit" in status["STATUS"] or status["STATUS"] == "starting"

    wait_until(lambda: agent.get("/healthz")[0] == 200, 20, "/healthz 200")
    inst = str(uuid.uuid4())
    reply = agent.call("instance_claim", instance_uuid=inst, flavor={"vcpus": 1, "memory_mb": 256})
    assert reply["ok"], reply

    code, text = agent.get("/metrics")
    assert code == 200
    families = {f.name: f for f in text_string_to_metric_families(text)}
    granted = [
        s for s in families["rtagent_claims"].samples if s.labels.get("outcome") == "granted"
    ]
    assert granted and granted[0].value == 1
    assert any(s.value > 0 for s in families["rtagent_placement_requests"].samples)
    assert "rtagent_audit_seconds" in families
    assert "rtagent_resource_capacity" in families

    code, body = agent.get("/status")
    node = json.loads(body)["nodes"][0]
    assert node["instances"] >= 1 and node["resources"]["VCPU"]["allocation_ratio"] == 16.0

    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(STOP_GUARD_S) == 0
    assert OUTLIVED not in agent.logs()
    agent.notify.wait_for("STOPPING", "1", timeout=1)

    # Restarted over the same state directory: the acknowledged claim is there.
    again = agent
    again.log.close()
    again.notify.received.clear()
    again.start()
    reply = again.call("get_status")
    assert reply["ok"] and reply["result"]["instances"] >= 1
    reply = again.call("abort_instance_claim", instance_uuid=inst)
    assert reply["result"] == {"released": True}


def test_sighup_applies_a_ratio_and_rejects_a_broken_config(run_agent, placement, broker):
    agent = run_agent()
    adapter = placement.admin_adapter()
    node = json.loads(agent.get("/status")[1])["nodes"][0]["node_uuid"]

    def ratio():
        invs = adapter.get(f"/resource_providers/{node}/inventories").json()["inventories"]
        return invs["VCPU"]["allocation_ratio"]

    wait_until(lambda: ratio() == 16.0, 20, "the initial ratio in Placement")
    agent.write_conf(broker, placement, "[DEFAULT]\ncpu_allocation_ratio = 20.0\n")
    agent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: ratio() == 20.0, 10, "the reloaded ratio in Placement")

    agent.write_conf(broker, placement, "[DEFAULT]\ncpu_allocation_ratio = -1\n")
    agent.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "Configuration reload rejected" in agent.logs(), 10, "the rejection")
    time.sleep(2.5)  # two more ticks under the old configuration
    assert agent.proc.poll() is None
    assert ratio() == 20.0
    assert agent.get("/healthz")[0] == 200


def test_healthz_503_while_placement_is_unreachable(run_agent, placement):
    agent = run_agent()
    wait_until(lambda: agent.get("/healthz")[0] == 200, 20, "/healthz 200")
    placement.pause()
    try:
        wait_until(lambda: agent.get("/healthz")[0] == 503, 30, "/healthz 503")
        body = json.loads(agent.get("/healthz")[1])
        assert any("placement" in r for r in body["reasons"]), body
    finally:
        placement.resume()
    wait_until(lambda: agent.get("/healthz")[0] == 200, 60, "/healthz back to 200")


def test_sigusr2_writes_a_guru_meditation_report(run_agent):
    agent = run_agent()
    agent.proc.send_signal(signal.SIGUSR2)
    wait_until(lambda: "Guru Meditation" in agent.logs(), 10, "the report")
    assert agent.proc.poll() is None
