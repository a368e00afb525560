"""The rtagent demo: a real Placement process, the agent on the libvirt test
driver's demo host, a few audit ticks and claims, then what Placement holds.

Run it with ``make demo`` (which prepares .venv first). Everything it starts
is stopped before it exits, also on failure; nothing outside a private
temporary directory is written.
"""

import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid

from rtagent import conf as rtconf
from rtagent import service
from rtagent.conf import validation
from rtagent.periodic import PeriodicLoop
from rtagent.placement.client import RequestObserver
from rtagent.testing.placement_server import PlacementServer
from rtagent.tracker.errors import ComputeResourcesUnavailable
from rtagent.tracker.model import Flavor
from rtagent.virt.libvirt.uri import validate_uri

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_HOST = os.path.join(TOP, "etc", "rtagent", "demo-host.xml")
TICK_S = 1


class CountingObserver(RequestObserver):
    """Counts the agent's Placement requests by method."""

    def __init__(self):
        self.by_method = {}

    def after(self, method, url, status, seconds):
        self.by_method[method] = self.by_method.get(method, 0) + 1


def write_config(workdir, endpoint):
    os.makedirs(os.path.join(workdir, "instances"), exist_ok=True)
    path = os.path.join(workdir, "rtagent.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            f"""[DEFAULT]
state_path = {workdir}/state
reserved_host_memory_mb = 2048
ram_allocation_ratio = 1.0
[libvirt]
connection_uri = test:///{DEMO_HOST}
instances_path = {workdir}/instances
[placement]
auth_type = admin_token
endpoint = {endpoint}
token = admin
[rtagent]
audit_interval = {TICK_S}
"""
        )
    return path


def allocate(placement, node, consumer, resources):
    """Do what a Nova scheduler does before a build: allocate in Placement."""
    body = {
        "allocations": {node: {"resources": resources}},
        "project_id": "demo-project",
        "user_id": "demo-user",
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    response = placement.put(f"/allocations/{consumer}", json=body)
    if response.status_code != 204:
        raise SystemExit(f"demo: allocation refused by Placement: {response.text}")


def wait_for_ticks(loop, count):
    target = loop.runs + count
    deadline = time.monotonic() + 30 * count
    while loop.runs < target:
        if time.monotonic() > deadline:
            raise SystemExit("demo: the audit loop stalled")
        time.sleep(0.1)


def show(placement, node, agent):
    provider = placement.get(f"/resource_providers/{node}").json()
    invs = placement.get(f"/resource_providers/{node}/inventories").json()["inventories"]
    traits = placement.get(f"/resource_providers/{node}/traits").json()["traits"]
    usages = placement.get(f"/resource_providers/{node}/usages").json()["usages"]
    snap = agent.tracker.snapshot()
    untracked = snap.untracked_usage
    claimed = {rc: snap.usage.get(rc, 0) - untracked.get(rc, 0) for rc in snap.usage}
    print("\nWhat Placement holds (read back over HTTP):")
    print(
        f"  provider  {provider['name']}  uuid={provider['uuid']}  "
        f"generation={provider['generation']}"
    )
    print(f"  traits    {', '.join(traits)}")
    header = (
        "class",
        "total",
        "reserved",
        "ratio",
        "max_unit",
        "capacity",
        "used",
        "claims",
        "untracked",
    )
    print("  " + "  ".join(f"{h:>10}" for h in header))
    for rc, inv in sorted(invs.items()):
        capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
        row = (
            rc,
            inv["total"],
            inv["reserved"],
            inv["allocation_ratio"],
            inv["max_unit"],
            f"{capacity:g}",
            usages.get(rc, 0),
            claimed.get(rc, 0),
            untracked.get(rc, 0),
        )
        print("  " + "  ".join(f"{v!s:>10}" for v in row))
    agree = all(usages.get(rc, 0) == claimed.get(rc, 0) for rc in invs)
    print(f"  Placement usages {'equal' if agree else 'DIFFER FROM'} the agent's claims")
    if snap.drift.untracked:
        names = ", ".join(f"{d.name} ({d.state_name})" for d in snap.drift.untracked)
        print(
            f"  drift: domains with no claim on this node: {names}; the running and "
            "paused ones count as used by the agent (count_untracked_domains)"
        )
    return agree


def main():
    logging.basicConfig(
        level=logging.INFO, format="  agent log: %(name)s: %(message)s", stream=sys.stdout
    )
    workdir = tempfile.mkdtemp(prefix="rtagent-demo-")
    print(f"demo: working directory {workdir} (removed at the end)")
    try:
        return run(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(workdir):
    with PlacementServer(workdir=os.path.join(workdir, "placement"), db_sync=False) as server:
        print(f"demo: Placement {server.endpoint} (pid {server.pid}, SQLite)")
        conf = rtconf.new_conf()
        conf(["--config-file", write_config(workdir, server.endpoint)], project="rtagent")
        validation.validate(conf, uri_validator=validate_uri)
        requests = CountingObserver()
        agent = service.build_agent(conf, observer=requests)
        loop = PeriodicLoop(agent.audit, conf.rtagent.audit_interval)
        worker = threading.Thread(target=loop.run, name="audit-loop", daemon=True)
        worker.start()
        try:
            wait_for_ticks(loop, 2)
            node = agent.tracker.node_uuid
            host = agent.tracker.snapshot().host
            print(
                f"demo: node {node} on {host.hypervisor_hostname} ({host.hypervisor_type}): "
                f"{host.vcpus} vCPUs, {host.memory_mb} MiB, {host.local_gb} GiB, "
                f"{len(host.domains)} domains"
            )
            placement = server.admin_adapter()
            for name, flavor in (("web", Flavor(2, 4096, 20)), ("db", Flavor(1, 8192, 40))):
                consumer = str(uuid.uuid4())
                resources = {
                    "VCPU": flavor.vcpus,
                    "MEMORY_MB": flavor.memory_mb,
                    "DISK_GB": flavor.root_gb,
                }
                allocate(placement, node, consumer, resources)
                claim = agent.tracker.instance_claim(consumer, flavor)
                print(f"demo: claim {name:<4} {consumer}: granted {dict(claim.resources)}")
            try:
                agent.tracker.instance_claim(str(uuid.uuid4()), Flavor(2, 30000, 10))
                print("demo: ERROR: an oversized claim was granted")
                return 1
            except ComputeResourcesUnavailable as exc:
                print(f"demo: claim big  refused ({exc.code}): {'; '.join(exc.reasons)}")
            wait_for_ticks(loop, 1)  # sees the generation the allocations moved
            before = dict(requests.by_method)
            wait_for_ticks(loop, 3)
            steady = {m: n - before.get(m, 0) for m, n in requests.by_method.items()}
            agree = show(placement, node, agent)
            print(
                f"demo: the agent's Placement requests: {requests.by_method} in all; "
                f"{steady} over the last 3 ticks (steady state)"
            )
            print(f"\ndemo: {loop.runs} audit ticks, {loop.failures} failed")
            return 0 if agree and loop.failures == 0 else 1
        finally:
            loop.stop()
            worker.join(10)
            agent.close()


if __name__ == "__main__":
    sys.exit(main())
