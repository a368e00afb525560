"""An agent serving RPC in this process, over a real broker, for tests and
benchmarks: the libvirt test driver's demo host and a real Placement."""

import os

from rtagent import conf as rtconf
from rtagent.rpc import transport
from rtagent.rpc.client import AgentClient
from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.rpc.server import RPCServer
from rtagent.service import builder
from tests.functional.conftest import DEMO_URI, make_adapter


def make_conf(workdir, transport_url, host="rpc-test-host", **overrides):
    """A validated-shape ConfigOpts for an agent in ``workdir``."""
    os.makedirs(os.path.join(workdir, "instances"), exist_ok=True)
    conf = rtconf.new_conf()
    transport.register_opts(conf)
    conf([], project="rtagent", default_config_files=[])
    values = {
        "host": host,
        "state_path": os.path.join(workdir, "state"),
        "transport_url": transport_url,
        "reserved_host_memory_mb": 2048,
        "ram_allocation_ratio": 1.0,
        "libvirt__connection_uri": DEMO_URI,
        "libvirt__instances_path": os.path.join(workdir, "instances"),
    }
    values.update(overrides)
    for name, value in values.items():
        group, _, opt = name.rpartition("__")
        conf.set_override(opt, value, group=group or None)
    return conf


class ServedAgent:
    """build_agent + one audit + an RPC server, stopped by :meth:`stop`.

    :param make_endpoint: callable(agent, host, host_ip) -> the endpoint to
        serve; :class:`AgentEndpoint` by default (a benchmark serves a
        subclass with a no-op method as its baseline).
    """

    def __init__(self, conf, placement_endpoint, make_endpoint=AgentEndpoint):
        self.conf = conf
        self.agent = builder.build_agent(conf, adapter=make_adapter(placement_endpoint))
        try:
            self.agent.audit()
            self.transport = transport.get_transport(conf)
            self.endpoint = make_endpoint(self.agent, conf.host, conf.my_ip)
            self.server = RPCServer(self.transport, conf.host, self.endpoint)
            self.server.start()
        except BaseException:
            self.agent.close()
            raise

    @property
    def node_uuid(self):
        return self.agent.tracker.node_uuid

    def client(self, timeout=30, retry=None):
        return AgentClient(self.transport, self.conf.host, timeout=timeout, retry=retry)

    def stop(self):
        try:
            self.server.stop()
            self.transport.cleanup()
        finally:
            self.agent.close()


def bounded_call(client, seconds, method, **args):
    """``client.call`` that fails the test after ``seconds`` instead of
    hanging (a client whose broker is down can block forever)."""
    import threading

    outcome = {}

    def run():
        try:
            outcome["reply"] = client.call(method, **args)
        except Exception as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TimeoutError(f"RPC {method} did not return within {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["reply"]
