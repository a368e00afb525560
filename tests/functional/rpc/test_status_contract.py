"""``get_status`` from ``rtagent run`` (a real daemon subprocess, a real
RabbitMQ, a real Placement process behind a proxy that can hang): the reply
has the documented shape, and ``sync.in_sync`` turns false as soon as a sync
is overdue, before ``[placement] timeout`` fails the hung request."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest

from rtagent.rpc.client import AgentClient
from rtagent.rpc.transport import get_transport
from rtagent.testing.faultproxy import FaultProxy
from rtagent.testing.placement_server import PlacementServer
from tests.functional.rpc.conftest import placement_adapter
from tests.functional.rpc.harness import DEMO_URI, bounded_call, make_conf
from tests.functional.rpc.test_pci_contract import conduct

pytestmark = pytest.mark.functional

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "rpc-api.md")
RTAGENT = os.path.join(os.path.dirname(sys.executable), "rtagent")
HOST = "status-contract"
# Far beyond the overdue wait's hang guard: the hung request cannot fail
# first, so an overdue that waited for it is seen (last_error set).
PLACEMENT_TIMEOUT_S = 300
AUDIT_INTERVAL_S = 1
SYNC_GRACE_S = 10  # as docs/rpc-api.md says
# Only a hang guard: 10 x how long the overdue takes to show (about 11 s).
OVERDUE_GUARD_S = 120
UUID_KEY = re.compile(r"\A[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}\Z")


def documented_status():
    """The JSON example of ``get_status``'s result in the doc."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("### `get_status`") :]
    return json.loads(re.search(r"Result:\n\n```json\n(.*?)\n```", section, re.S).group(1))


def missing(actual, documented, path=""):
    """Paths of the documented fields that ``actual`` lacks (lists compared
    by their first items, a UUID key of the doc's standing for any key:
    maps keyed by node); fields the doc does not name are allowed (1.x may
    add fields)."""
    if isinstance(documented, dict):
        if not isinstance(actual, dict):
            return [path or "(top)"]
        found = []
        for doc_key, value in documented.items():
            key = next(iter(actual), doc_key) if UUID_KEY.match(doc_key) else doc_key
            if key not in actual:
                found.append(f"{path}.{key}")
            else:
                found += missing(actual[key], value, f"{path}.{key}")
        return found
    if isinstance(documented, list) and documented:
        if not isinstance(actual, list) or not actual:
            return [f"{path}[]"]
        return missing(actual[0], documented[0], f"{path}[]")
    return []


class Daemon:
    """``rtagent run`` on a config file; killed by PID at the end."""

    def __init__(self, tmp_path, transport_url, placement_endpoint):
        (tmp_path / "instances").mkdir()
        self.conf_path = tmp_path / "rtagent.conf"
        self.conf_path.write_text(
            f"""[DEFAULT]
host = {HOST}
state_path = {tmp_path}/state
transport_url = {transport_url}
reserved_host_memory_mb = 2048
[libvirt]
connection_uri = {DEMO_URI}
instances_path = {tmp_path}/instances
[placement]
auth_type = admin_token
endpoint = {placement_endpoint}
token = admin
timeout = {PLACEMENT_TIMEOUT_S}
[rtagent]
audit_interval = {AUDIT_INTERVAL_S}
# Every audit reads Placement, so a hung Placement is met at the next one
# (with an interval, an unchanged node meets it at its next due read).
placement_refresh_interval = 0
[daemon]
startup_delay = 0
notifications = false
[health]
enabled = false
"""
        )
        self.log = open(tmp_path / "agent.log", "wb")
        self.proc = subprocess.Popen(
            [RTAGENT, "--config-file", str(self.conf_path), "run"],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def running(broker, tmp_path):
    # A Placement per test: each daemon registers the demo host's name under
    # its own UUID.
    with (
        PlacementServer(db_sync=False) as placement,
        FaultProxy(placement.endpoint, upstream_timeout=120) as proxy,
    ):
        agent = Daemon(tmp_path, broker.transport_url, proxy.endpoint)
        transport = get_transport(make_conf(str(tmp_path / "client"), broker.transport_url))
        try:
            yield agent, proxy, AgentClient(transport, HOST, timeout=10)
        finally:
            proxy.release()
            agent.stop()
            transport.cleanup()


def status(client):
    reply = bounded_call(client, 15, "get_status")
    assert reply["ok"], reply
    return reply["result"]


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = predicate()
        except Exception:  # not serving yet (the call times out)
            found = None
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"not within {seconds} s: {what}")


def test_get_status_has_the_documented_shape(running):
    _, _, client = running
    node = wait_for(lambda: status(client)["sync"]["in_sync"] and status(client), 90, "in sync")[
        "node_uuid"
    ]
    instance = str(uuid.uuid4())
    flavor = {"vcpus": 1, "memory_mb": 256}
    for method, args in (
        ("instance_claim", {"instance_uuid": instance, "flavor": flavor}),
        (
            "start_move",
            {
                "migration_uuid": str(uuid.uuid4()),
                "instance_uuid": instance,
                "migration_type": "resize",
                "source_node": node,
                "dest_node": node,
                "old_flavor": flavor,
            },
        ),
    ):
        reply = bounded_call(client, 15, method, **args)
        assert reply["ok"], reply
    result = status(client)
    assert missing(result, documented_status()) == []
    assert result["disabled"] is None
    bounded_call(client, 15, "set_disabled", disabled=True)
    assert status(client)["disabled"] == "disabled"
    bounded_call(client, 15, "set_disabled", disabled=True, reason="maintenance")
    assert status(client)["disabled"] == "maintenance"


def test_in_sync_is_false_once_a_sync_is_overdue(running):
    """Documented: overdue after audit_interval x (1 + jitter) + 10 s
    without a success, or an audit under way for over 10 s, whatever
    [placement] timeout is. Judged by the order of the agent's events and
    its own clock, which a loaded machine does not change, not by the
    test's wall time."""
    _, proxy, client = running
    wait_for(lambda: status(client)["sync"]["in_sync"], 90, "the daemon in sync")
    proxy.hold()  # Placement hangs: every request waits, unanswered
    assert OVERDUE_GUARD_S < PLACEMENT_TIMEOUT_S / 2
    result = wait_for(
        lambda: (r := status(client)) and not r["sync"]["in_sync"] and r,
        OVERDUE_GUARD_S,
        "in_sync false while Placement hangs",
    )
    sync = result["sync"]
    # Not a failure seen (the hung request has not timed out): overdue.
    assert sync["overdue"] is True and sync["last_error"] is None, sync
    # Not before the grace: the last success is at least 10 s old (the
    # audit under way began after it).
    assert result["generated_at"] - sync["last_success"] >= SYNC_GRACE_S - 0.5, result
    proxy.release()
    sync = wait_for(lambda: (s := status(client)["sync"])["in_sync"] and s, 60, "in sync again")
    assert sync["overdue"] is False


def test_claims_free_is_how_much_more_claims_take(running, broker):
    """issue 34: on the demo host, filled in part, each class's
    ``claims.free`` (what claims are checked against) is exactly what
    further claims can take, asked by a conductor that does not import
    rtagent; ``placement`` is the inventory Placement holds. (The plain
    ``free`` counts the running domains without a claim as used, where
    claims and Placement reserve them in whole units: VCPU free 5 while 4
    claims fit, on the empty demo host.)"""
    _, proxy, client = running
    wait_for(lambda: status(client)["sync"]["in_sync"], 90, "the daemon in sync")

    def call(*calls):
        return [_result(r) for r in conduct(broker, *calls, server=HOST, version="1.6")]

    def claim(instance, vcpus, memory_mb):
        flavor = {"vcpus": vcpus, "memory_mb": memory_mb}
        return ("instance_claim", {"instance_uuid": instance, "flavor": flavor})

    _, after_fill = call(claim(str(uuid.uuid4()), 2, 4096), ("get_status", {}))
    resources = after_fill["resources"]
    node = after_fill["node_uuid"]
    in_placement = placement_adapter(proxy.endpoint, 30).get(
        f"/resource_providers/{node}/inventories"
    )
    for rc, held in in_placement.json()["inventories"].items():
        shown = resources[rc]["placement"]
        assert (shown["total"], shown["reserved"], shown["allocation_ratio"]) == (
            held["total"],
            held["reserved"],
            held["allocation_ratio"],
        ), rc
        assert shown["capacity"] == (held["total"] - held["reserved"]) * held["allocation_ratio"]

    # MEMORY_MB: a claim of one MiB more than claims.free is refused for
    # memory, one of exactly that much fits and leaves 0.
    memory = int(resources["MEMORY_MB"]["claims"]["free"])
    assert memory == resources["MEMORY_MB"]["claims"]["free"] > 0
    probe = str(uuid.uuid4())
    over, fits, full, _ = conduct(
        broker,
        claim(probe, 1, memory + 1),
        claim(probe, 1, memory),
        ("get_status", {}),
        ("abort_instance_claim", {"instance_uuid": probe}),
        server=HOST,
        version="1.6",
    )
    assert over["error"]["code"] == "tracker.compute_resources_unavailable", over
    assert [r.split(":")[0] for r in over["error"]["details"]["reasons"]] == ["MEMORY_MB"]
    assert _result(fits)["resources"]["MEMORY_MB"] == memory
    assert _result(full)["resources"]["MEMORY_MB"]["claims"]["free"] == 0

    # VCPU: one-vCPU claims until refused; as many fit as claims.free said.
    vcpus = resources["VCPU"]["claims"]["free"]
    replies = conduct(
        broker,
        *[claim(str(uuid.uuid4()), 1, 1) for _ in range(int(vcpus) + 3)],
        server=HOST,
        version="1.6",
    )
    granted = [r["ok"] for r in replies]
    assert granted == sorted(granted, reverse=True), granted  # none after a refusal
    assert granted.count(True) == vcpus, (resources["VCPU"], replies[granted.count(True)])
    assert replies[-1]["error"]["details"]["reasons"] == [
        f"VCPU: requested 1, free 0 of capacity {resources['VCPU']['claims']['capacity']:g}"
    ]


def _result(reply):
    assert reply["ok"], reply
    return reply["result"]
