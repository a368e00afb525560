"""Logs for an operator, read from a real ``rtagent run`` (real RabbitMQ,
a real Placement process, the libvirt test driver): the caller's request id
in every line of an RPC call, ``--debug`` tracing Placement requests and
sync decisions, and ``Placement updated`` lines that say what changed."""

import json
import os
import re
import signal
import subprocess
import uuid

import pytest

from rtagent.rpc import transport as rpc_transport
from tests.functional.rpc.harness import bounded_call, make_conf
from tests.integration.test_daemon import RTAGENT, Agent, wait_until

pytestmark = pytest.mark.integration


class DebugAgent(Agent):
    """``rtagent --debug ... run`` (the command-line switch itself)."""

    def start(self, wait_ready=True):
        env = dict(os.environ, NOTIFY_SOCKET=self.notify.path)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [RTAGENT, "--debug", "--config-file", str(self.conf_path), "run"],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        if wait_ready:
            self.notify.wait_for("READY", "1", timeout=60)


@pytest.fixture
def start_agent(tmp_path, broker, placement):
    agents = []

    def start(kind=Agent, extra=""):
        agent = kind(tmp_path, broker, placement, extra)
        agents.append(agent)
        agent.start()
        wait_until(lambda: agent.get("/healthz")[0] == 200, 30, "/healthz 200")
        return agent

    yield start
    for agent in agents:
        agent.stop()
        agent.notify.close()


class ContextClient:
    """An oslo.messaging client of the agent that sends ``ctxt`` with each
    call, as nova's RPC clients send their RequestContext.to_dict()."""

    def __init__(self, agent, ctxt):
        om = rpc_transport.messaging()
        self.transport = rpc_transport.get_transport(
            make_conf(str(agent.tmp / "client"), agent.broker.transport_url)
        )
        target = om.Target(
            topic=rpc_transport.TOPIC, server="daemon-test", version=rpc_transport.API_VERSION
        )
        self._client = om.get_rpc_client(self.transport, target, timeout=15)
        self.ctxt = ctxt

    def call(self, method, **args):
        return self._client.call(self.ctxt, method, **args)

    def close(self):
        self.transport.cleanup()


def request_id():
    return f"req-{uuid.uuid4()}"


def lines_with(text, logs):
    return [line for line in logs.splitlines() if text in line]


def test_every_log_line_of_an_rpc_call_carries_the_callers_request_id(start_agent):
    agent = start_agent()
    granted, refused, global_id = request_id(), request_id(), request_id()
    instance = str(uuid.uuid4())
    client = ContextClient(
        agent,
        {
            "request_id": granted,
            "global_request_id": global_id,
            "user_id": "3f1c",
            "project_id": "9a2b",
            "auth_token": "never-logged",
        },
    )
    try:
        reply = bounded_call(
            client,
            20,
            "instance_claim",
            instance_uuid=instance,
            flavor={"vcpus": 1, "memory_mb": 1},
        )
        assert reply["ok"], reply
        client.ctxt = {"request_id": refused}
        reply = bounded_call(client, 20, "instance_claim", instance_uuid="not-a-uuid", flavor={})
        assert reply["error"]["code"] == "rpc.invalid_request"
        # A forged id (a line break to fake a log line) is not taken.
        client.ctxt = {"request_id": "req-1\nFORGED"}
        reply = bounded_call(client, 20, "ping")
        assert reply["ok"]
    finally:
        client.close()

    wait_until(lambda: lines_with(refused, agent.logs()), 10, "the refusal's log line")
    logs = agent.logs()
    claimed = lines_with(instance, logs)
    assert claimed, logs[-3000:]
    for line in claimed:
        # oslo.log's context format: [global_request_id request_id user project ...]
        assert f"[{global_id} {granted} 3f1c 9a2b" in line, line
    refusal = lines_with("RPC instance_claim refused", logs)
    assert refusal and all(refused in line for line in refusal), refusal
    assert "FORGED" not in logs and "never-logged" not in logs
    # Lines outside a call (the audit loop) carry no request id.
    audit = [line for line in logs.splitlines() if " rtagent.placement.sync " in line]
    assert audit and all("[-]" in line for line in audit), audit[:3]


def test_debug_traces_placement_requests_and_sync_decisions(start_agent):
    agent = start_agent(DebugAgent)
    node = json.loads(agent.get("/status")[1])["nodes"][0]["node_uuid"]
    request = re.compile(
        rf"DEBUG rtagent\.placement\.client \[-\] Placement GET "
        rf"/resource_providers\?in_tree={node} -> 200 in [0-9]+\.[0-9] ms"
    )
    steady = f"Sync of tree {node}, attempt 1: 1 provider(s) unchanged; nothing to write"
    wait_until(lambda: steady in agent.logs(), 20, "a steady sync decision")
    logs = agent.logs()
    assert request.search(logs), logs[-3000:]
    # The first sync: the tree was not cached, and what it wrote.
    assert re.search(
        rf"Sync of tree {node}, attempt 1: 0 provider\(s\) unchanged; 3 operation\(s\) to write",
        logs,
    ), logs[-3000:]
    for write in ("POST /resource_providers", f"PUT /resource_providers/{node}/inventories"):
        assert re.search(rf"Placement {write} -> 200 in [0-9.]+ ms", logs), write


def test_placement_updated_lines_say_which_fields_and_traits_changed(
    start_agent, broker, placement
):
    agent = start_agent()
    node = json.loads(agent.get("/status")[1])["nodes"][0]["node_uuid"]
    logs = agent.logs()
    # Creation: the traits added and every field of each new inventory.
    # The demo host's 4 guests have no claim: their 7 vCPUs are reserved as
    # 1 CPU at ratio 16.0, their 7168 MiB beside the configured 2048.
    assert re.search(rf"SetTraits\({node}: \+COMPUTE_NODE \+HW_ARCH_I686 \+OWNER_NOVA\)", logs), (
        logs[-3000:]
    )
    assert re.search(
        r"\+VCPU total=\d+ reserved=1 min_unit=1 max_unit=\d+ step_size=1 allocation_ratio=16\.0",
        logs,
    ), logs[-3000:]

    agent.write_conf(
        broker,
        placement,
        "[DEFAULT]\ncpu_allocation_ratio = 20.0\nreserved_host_memory_mb = 1024\n",
    )
    agent.proc.send_signal(signal.SIGHUP)
    changed = (
        f"Placement updated: SetInventories({node}: "
        "MEMORY_MB reserved 9216->8192, VCPU allocation_ratio 16.0->20.0)"
    )
    wait_until(lambda: changed in agent.logs(), 20, "the inventory change in the log")

    assert agent.call("set_disabled", disabled=True)["ok"]
    disabled = f"Placement updated: SetTraits({node}: +COMPUTE_STATUS_DISABLED)"
    wait_until(lambda: disabled in agent.logs(), 20, "the trait change in the log")
    assert agent.call("set_disabled", disabled=False)["ok"]
    enabled = f"Placement updated: SetTraits({node}: -COMPUTE_STATUS_DISABLED)"
    wait_until(lambda: enabled in agent.logs(), 20, "the trait removal in the log")
