"""Placement right within a second of every change, under ``rtagent run``.

A real ``rtagent run`` process whose audit comes only every 600 s, a real
Placement process, a real RabbitMQ, the libvirt test driver's SR-IOV host
with ``[pci] report_in_placement``. A conductor calls it over the broker
with oslo.messaging alone (as docs/rpc-api.md says), and after each change
the test reads Placement's REST API until it shows the change: a claim
whose allocation the scheduler wrote without its devices, an attach, a
detach, a disable and an enable must each be there before any audit ran
(the seconds each took are printed; a loaded machine stretches them, so
their bound only catches a hang). Without the prompt sync they waited for
the next audit, ten minutes later.
"""

import json
import time
import uuid

import oslo_messaging
import pytest
from oslo_config import cfg

from tests.functional.test_pci_tracking import HOST_XML, PF, VFS
from tests.integration.test_daemon import Agent

pytestmark = pytest.mark.integration

HOST = "prompt-sync-host"
# Only a hang guard: over 10 x the slowest measured (0.3 to 0.8 s idle,
# 0.3 to 1.2 s under a load of 10), far below the 600 s audit interval.
# That no audit ran is the check.
GUARD_S = 20.0
VF_SPEC = '{"vendor_id": "8086", "product_id": "154c"}'
NIC_ALIAS = '{"name": "nic", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}'
VF_CLASS = "CUSTOM_PCI_8086_154C"
DISABLED = "COMPUTE_STATUS_DISABLED"


class SlowAuditAgent(Agent):
    """``rtagent run`` on the SR-IOV host, auditing every 600 s."""

    def write_conf(self, broker, placement, extra=""):
        (self.tmp / "instances").mkdir(exist_ok=True)
        self.conf_path.write_text(
            f"""[DEFAULT]
host = {HOST}
state_path = {self.tmp}/state
transport_url = {broker.transport_url}
reserved_host_memory_mb = 0
[libvirt]
connection_uri = test://{HOST_XML}
instances_path = {self.tmp}/instances
[placement]
auth_type = admin_token
endpoint = {placement.endpoint}
token = admin
[pci]
device_spec = {VF_SPEC}
alias = {NIC_ALIAS}
report_in_placement = true
[rtagent]
audit_interval = 600
[daemon]
startup_delay = 0
audit_jitter = 0
shutdown_timeout = 15
[health]
port = {self.port}
"""
        )


class Conductor:
    """Calls the agent with oslo.messaging only, as another codebase would."""

    def __init__(self, url):
        self.transport = oslo_messaging.get_rpc_transport(cfg.CONF, url=url)
        target = oslo_messaging.Target(
            exchange="rtagent", topic="rtagent", server=HOST, version="1.6"
        )
        self.client = oslo_messaging.get_rpc_client(self.transport, target, timeout=30)

    def call(self, method, **args):
        reply = self.client.call({}, method, **args)
        assert reply["ok"], reply
        return reply["result"]

    def close(self):
        self.transport.cleanup()


@pytest.fixture
def cloud(tmp_path, broker, placement):
    agent = SlowAuditAgent(tmp_path, broker, placement)
    conductor = None
    try:
        agent.start()
        conductor = Conductor(broker.transport_url)
        yield agent, conductor, placement.admin_adapter()
    finally:
        if conductor is not None:
            conductor.close()
        agent.stop()
        agent.notify.close()


def seconds_until(predicate, what):
    """Seconds until ``predicate()`` holds, polled every 20 ms; fails past
    :data:`GUARD_S`."""
    started = time.monotonic()
    while True:
        if predicate():
            return time.monotonic() - started
        waited = time.monotonic() - started
        if waited > GUARD_S:
            raise AssertionError(f"{what}: not in Placement after {waited:.2f} s")
        time.sleep(0.02)


def test_claims_attach_detach_and_disable_reach_placement_before_the_next_audit(cloud):
    agent, conductor, api = cloud
    status = json.loads(agent.get("/status")[1])
    root = status["nodes"][0]["node_uuid"]
    providers = api.get(f"/resource_providers?in_tree={root}").json()["resource_providers"]
    pf = next(p["uuid"] for p in providers if p["name"].endswith(PF.upper()))
    audits = status["nodes"][0]["sync"]["audits"]

    # The scheduler allocated the flavor only (nova's, without the PCI
    # prefilter); the claim takes a VF.
    instance = str(uuid.uuid4())
    user = {"project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4())}
    written = api.put(
        f"/allocations/{instance}",
        json={
            "allocations": {root: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}},
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
            **user,
        },
        microversion="1.38",
    )
    assert written.status_code == 204, written.text
    claimed = conductor.call(
        "instance_claim",
        instance_uuid=instance,
        flavor={"vcpus": 1, "memory_mb": 256},
        pci_requests=[{"alias": "nic", "count": 1}],
    )
    assert [d["address"] for d in claimed["pci_devices"]] in ([v] for v in VFS)

    def vfs_held():
        held = api.get(f"/allocations/{instance}").json()["allocations"]
        return held.get(pf, {}).get("resources", {}).get(VF_CLASS, 0)

    took = {"claim": seconds_until(lambda: vfs_held() == 1, "the claim's VF")}

    attached = conductor.call(
        "attach_pci_devices",
        instance_uuid=instance,
        pci_requests=[{"alias": "nic", "count": 1, "request_id": "port-1"}],
    )
    (extra,) = attached["pci_devices"]
    took["attach"] = seconds_until(lambda: vfs_held() == 2, "the attached VF")

    conductor.call("detach_pci_devices", instance_uuid=instance, addresses=[extra["address"]])
    took["detach"] = seconds_until(lambda: vfs_held() == 1, "the detached VF")

    def traits():
        return set(api.get(f"/resource_providers/{root}/traits").json()["traits"])

    conductor.call("set_disabled", node_uuid=root, disabled=True, reason="maintenance")
    took["disable"] = seconds_until(lambda: DISABLED in traits(), "the disabled trait")
    conductor.call("set_disabled", node_uuid=root, disabled=False)
    took["enable"] = seconds_until(lambda: DISABLED not in traits(), "the trait removed")

    # All of it between two audits: the prompt sync did it, not the loop.
    status = json.loads(agent.get("/status")[1])
    assert status["nodes"][0]["sync"]["audits"] == audits, took
    print("prompt sync seconds:", {k: round(v, 3) for k, v in took.items()})
