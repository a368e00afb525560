"""docs/rpc-api.md, "Timeouts, and reading an outcome back": a call that
timed out during a broker outage may still have run, and ``get_instance``
reads its outcome back. A real RabbitMQ (stopped and started again by PID),
a real Placement behind a proxy that holds the standalone claim's write
until the broker is down."""

import threading
import time
import uuid

import pytest

from rtagent.rpc import transport
from rtagent.rpc.client import AgentClient
from tests.functional.rpc.conftest import Served
from tests.functional.rpc.harness import bounded_call, make_conf

pytestmark = pytest.mark.functional

FLAVOR = {"vcpus": 1, "memory_mb": 256}


@pytest.fixture(scope="module")
def served(broker, placement_server, tmp_path_factory):
    agent = Served(
        make_conf(str(tmp_path_factory.mktemp("read-back")), broker.transport_url, host="rb-host"),
        placement_server.endpoint,
        placement_timeout=60,
    )
    yield agent
    agent.stop()


def wait_until(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # the broker is still coming back
            pass
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_a_call_timed_out_in_a_broker_outage_ran_and_is_read_back(served, broker, placement_server):
    inst = str(uuid.uuid4())
    tracker = served.agent.tracker
    caller = {}

    def conductor():
        try:
            caller["reply"] = bounded_call(
                served.client(timeout=10),
                20,
                "instance_claim",
                instance_uuid=inst,
                flavor=FLAVOR,
                project_id="p",
                user_id="u",
            )
        except Exception as exc:  # MessagingTimeout, or the bound
            caller["error"] = exc

    served.proxy.hold()  # the agent's Placement write waits...
    thread = threading.Thread(target=conductor, daemon=True)
    thread.start()
    try:
        wait_until(lambda: inst in tracker.snapshot().pending, 20, "the agent took the call")
        broker.stop(keep_epmd=True)  # ...while the broker goes down
    finally:
        served.proxy.release()
    wait_until(
        lambda: (
            inst not in tracker.snapshot().pending
            and inst in {i.uuid for i in tracker.snapshot().instances}
        ),
        30,
        "the claim granted on the agent",
    )
    thread.join(30)
    assert "reply" not in caller, caller  # the caller saw a timeout, no outcome
    broker.start()

    fresh = transport.get_transport(served.conf)
    try:
        client = AgentClient(fresh, served.conf.host, timeout=10)
        wait_until(lambda: bounded_call(client, 15, "ping")["ok"], 90, "the agent serving again")
        reply = bounded_call(client, 15, "get_instance", instance_uuid=inst)
    finally:
        fresh.cleanup()
    assert reply["ok"], reply
    record = reply["result"]
    assert record["claim"]["resources"] == {"VCPU": 1, "MEMORY_MB": 256}
    assert (record["pending"], record["released"]) == (False, False)
    resp = placement_server.admin_adapter().get(f"/allocations/{inst}")
    held = resp.json()["allocations"]
    assert {rp: a["resources"] for rp, a in held.items()} == {
        served.node_uuid: {"VCPU": 1, "MEMORY_MB": 256}
    }
