"""A tiny conductor: drives one rtagent through its RPC API, as a Nova
conductor and scheduler would, and says what it did.

    python tools/conductor.py --transport-url rabbit://... --host HOST \\
        --placement http://127.0.0.1:PORT

The scenario: allocate two instances in Placement (the scheduler's part)
and claim them on the agent; try a claim that does not fit; delete one (the
agent heals its allocation in Placement by itself); resize the other on the
same node (start, finish, confirm; the scheduler moves its allocation).
Used by the demo (``make demo``); needs a running agent and broker.
"""

import argparse
import sys
import uuid

from oslo_config import cfg

from rtagent.rpc import transport
from rtagent.rpc.client import AgentClient
from rtagent.testing.placement_server import admin_adapter

WEB = {"vcpus": 2, "memory_mb": 4096, "root_gb": 20}
WEB_LARGE = {"vcpus": 2, "memory_mb": 6144, "root_gb": 30}
DB = {"vcpus": 1, "memory_mb": 8192, "root_gb": 40}
TOO_BIG = {"vcpus": 2, "memory_mb": 30000, "root_gb": 10}


def resources(flavor):
    return {"VCPU": flavor["vcpus"], "MEMORY_MB": flavor["memory_mb"], "DISK_GB": flavor["root_gb"]}


class Conductor:
    """RPC to the agent, and the scheduler's writes to Placement."""

    def __init__(self, transport_url, host, placement_endpoint, timeout=30):
        conf = cfg.ConfigOpts()
        transport.register_opts(conf)
        conf([], project="rtagent-conductor", default_config_files=[])
        self._transport = transport.get_transport(conf, url=transport_url)
        # retry=3: a conductor whose broker is down must not hang forever.
        self.agent = AgentClient(self._transport, host, timeout=timeout, retry=3)
        self.placement = admin_adapter(placement_endpoint)
        self.node = None

    def close(self):
        self._transport.cleanup()

    def call(self, method, **args):
        """An RPC call; returns the result or raises with the error code."""
        reply = self.agent.call(method, **args)
        if not reply["ok"]:
            raise RefusedError(reply["error"])
        return reply["result"]

    def allocate(self, consumer, flavor):
        """The scheduler's part: allocate ``flavor`` on the node."""
        current = self.placement.get(f"/allocations/{consumer}").json()
        body = {
            "allocations": {self.node: {"resources": resources(flavor)}},
            "project_id": "demo-project",
            "user_id": "demo-user",
            "consumer_generation": current.get("consumer_generation"),
            "consumer_type": "INSTANCE",
        }
        response = self.placement.put(f"/allocations/{consumer}", json=body)
        if response.status_code != 204:
            raise RuntimeError(f"Placement refused the allocation: {response.text}")


class RefusedError(Exception):
    def __init__(self, error):
        self.code = error["code"]
        super().__init__(f"{error['code']}: {error['message']}")


def run_scenario(conductor, say=print):
    """Drive the agent; returns {name: instance uuid} of what it claimed."""
    status = conductor.call("get_status")
    conductor.node = status["node_uuid"]
    say(f"conductor: agent on {status['hypervisor_hostname']}, node {conductor.node}")
    claimed = {}
    for name, flavor in (("web", WEB), ("db", DB)):
        uid = str(uuid.uuid4())
        conductor.allocate(uid, flavor)
        claim = conductor.call("instance_claim", instance_uuid=uid, flavor=flavor)
        conductor.call("update_instance", instance_uuid=uid, vm_state="active", task_state=None)
        claimed[name] = uid
        say(f"conductor: claim {name:<3} {uid}: granted {claim['resources']}")
    try:
        conductor.call("instance_claim", instance_uuid=str(uuid.uuid4()), flavor=TOO_BIG)
        raise RuntimeError("an oversized claim was granted")
    except RefusedError as exc:
        say(f"conductor: claim big refused: {exc}")

    conductor.call("update_instance", instance_uuid=claimed["db"], vm_state="deleted")
    say("conductor: deleted db; its allocation is left for the agent to heal")

    # A same-node resize holds both flavors until it is confirmed, as
    # Placement and nova count it: web's new flavor fits beside its old one
    # once db is gone.
    migration = str(uuid.uuid4())
    node = conductor.node
    conductor.call(
        "start_move",
        migration_uuid=migration,
        instance_uuid=claimed["web"],
        migration_type="resize",
        source_node=node,
        dest_node=node,
        old_flavor=WEB,
        new_flavor=WEB_LARGE,
    )
    conductor.call("finish_move", migration_uuid=migration)
    conductor.allocate(claimed["web"], WEB_LARGE)
    conductor.call("confirm_move", migration_uuid=migration)
    say(f"conductor: resized web to {WEB_LARGE} on the same node (start, finish, confirm)")
    return claimed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport-url", required=True)
    parser.add_argument("--host", required=True, help="the agent's [DEFAULT] host")
    parser.add_argument("--placement", required=True, help="Placement endpoint (noauth2)")
    args = parser.parse_args(argv)
    conductor = Conductor(args.transport_url, args.host, args.placement)
    try:
        run_scenario(conductor)
    except RefusedError as exc:
        print(f"conductor: error: {exc}", file=sys.stderr)
        return 1
    finally:
        conductor.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
