"""The rtagent demo: the agent as a service, driven over RabbitMQ.

It starts a real Placement process (SQLite) and a private RabbitMQ broker on
loopback, then ``rtagent run`` as a real subprocess against the libvirt test
driver's demo host (etc/rtagent/demo-host.xml), auditing every second. A
small conductor (tools/conductor.py) drives it through the RPC API: two
claims, one refused, a same-node resize, a delete. The demo then prints what
Placement holds beside the agent's own status, and stops the agent with
SIGTERM (it must exit 0).

Run it with ``make demo`` (which prepares .venv first). Everything it starts
is stopped before it exits, also on failure; nothing outside a private
temporary directory is written.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import conductor as conductor_mod

from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.rabbitmq import RabbitMQ

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_HOST = os.path.join(TOP, "etc", "rtagent", "demo-host.xml")
RTAGENT = os.path.join(os.path.dirname(sys.executable), "rtagent")
AGENT_HOST = "demo-host"


def write_config(workdir, placement_endpoint, transport_url):
    os.makedirs(os.path.join(workdir, "instances"), exist_ok=True)
    path = os.path.join(workdir, "rtagent.conf")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            f"""[DEFAULT]
host = {AGENT_HOST}
state_path = {workdir}/state
transport_url = {transport_url}
reserved_host_memory_mb = 2048
ram_allocation_ratio = 1.0
[libvirt]
connection_uri = test:///{DEMO_HOST}
instances_path = {workdir}/instances
[placement]
auth_type = admin_token
endpoint = {placement_endpoint}
token = admin
[rtagent]
audit_interval = 1
[daemon]
startup_delay = 0
[health]
enabled = false
"""
        )
    return path


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: gave up waiting for {what}")
        time.sleep(0.5)


def show(conductor, placement, deleted):
    node = conductor.node
    get = placement.get
    provider = get(f"/resource_providers/{node}").json()
    invs = get(f"/resource_providers/{node}/inventories").json()["inventories"]
    traits = get(f"/resource_providers/{node}/traits").json()["traits"]
    usages = get(f"/resource_providers/{node}/usages").json()["usages"]
    status = conductor.call("get_status")
    print("\nWhat Placement holds (read back over HTTP), beside the agent's status (over RPC):")
    print(
        f"  provider  {provider['name']}  uuid={provider['uuid']}  "
        f"generation={provider['generation']}"
    )
    print(f"  traits    {', '.join(sorted(traits))}")
    header = ("class", "total", "reserved", "ratio", "capacity", "used", "agent used")
    print("  " + "  ".join(f"{h:>10}" for h in header))
    for rc, inv in sorted(invs.items()):
        capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
        agent_used = status["resources"].get(rc, {}).get("used", "-")
        row = (
            rc,
            inv["total"],
            inv["reserved"],
            inv["allocation_ratio"],
            f"{capacity:g}",
            usages.get(rc, 0),
            agent_used,
        )
        print("  " + "  ".join(f"{v!s:>10}" for v in row))
    drift = status["drift"]
    sync = status["sync"] or {}
    node = sync.get("placement") or {}
    print(
        f"  agent: {status['instances']} instance(s); Placement in sync: "
        f"{node.get('in_sync')}, {sync.get('audits')} audits, last error: "
        f"{node.get('last_error')}, unknown consumers: {len(node.get('unknown_consumers', []))}, "
        f"healing backlog: {node.get('healing_backlog')}"
    )
    print(
        f"  agent: domains on the host with no claim (published as reserved): "
        f"{len(drift['untracked_domains'])}"
    )
    left = get(f"/allocations/{deleted}").json()["allocations"]
    print(f"  allocations of the deleted instance left in Placement: {left or 'none'}")
    return not left


def run(workdir):
    with (
        RabbitMQ(workdir=os.path.join(workdir, "rabbitmq")) as broker,
        PlacementServer(workdir=os.path.join(workdir, "placement"), db_sync=False) as server,
    ):
        print(f"demo: Placement {server.endpoint} (pid {server.pid}, SQLite)")
        print(f"demo: RabbitMQ {broker.transport_url} (pid {broker.pid})")
        config = write_config(workdir, server.endpoint, broker.transport_url)
        log_path = os.path.join(workdir, "rtagent.log")
        with open(log_path, "w") as log:
            agent = subprocess.Popen(
                [RTAGENT, "--config-file", config, "run"], stdout=log, stderr=subprocess.STDOUT
            )
        print(f"demo: rtagent run (pid {agent.pid}), log {log_path}")
        conductor = conductor_mod.Conductor(broker.transport_url, AGENT_HOST, server.endpoint)
        try:
            wait_for(lambda: agent.poll() is None and conductor.call("ping"), "the agent's RPC")
            claimed = conductor_mod.run_scenario(conductor, say=lambda m: print("demo: " + m))
            # Healing removes a released consumer on the second tick that
            # sees it unchanged: wait for it (bounded).
            wait_for(
                lambda: (
                    not server.admin_adapter()
                    .get(f"/allocations/{claimed['db']}")
                    .json()["allocations"]
                ),
                "the deleted instance's allocation to be healed",
                timeout=30,
            )
            healed = show(conductor, server.admin_adapter(), claimed["db"])
        finally:
            conductor.close()
            if agent.poll() is None:
                agent.send_signal(signal.SIGTERM)
            try:
                code = agent.wait(60)
            except subprocess.TimeoutExpired:
                agent.kill()
                code = agent.wait()
            print(f"\ndemo: rtagent stopped by SIGTERM, exit status {code}")
        if code != 0:
            with open(log_path) as f:
                print(f.read()[-3000:], file=sys.stderr)
        return 0 if healed and code == 0 else 1


def main():
    workdir = tempfile.mkdtemp(prefix="rtagent-demo-")
    print(f"demo: working directory {workdir} (removed at the end)")
    try:
        return run(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
