# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""An embedded agent reached over oslo.messaging, for nova's tests of the
RPC path: the agent's own RPC server (the daemon's dispatcher and guards)
on a private in-memory transport (``fake://``, which round-trips every
message through JSON), and the tracker calling it with the RPC client.
"""

from oslo_config import cfg

from rtagent.nova.link import RpcLink
from rtagent.rpc import transport
from rtagent.rpc.client import AgentClient
from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.rpc.server import RPCServer

# rtagent-nova-compute's default ([rtagent] rpc_timeout, docs/nova.md).
CALL_TIMEOUT_S = 60


class ServedLink(RpcLink):
    """:param local: the :class:`~rtagent.nova.link.LocalLink` whose agent
    is served; audits still run in-process (the daemon's loop is not here).
    """

    def __init__(self, local, host):
        conf = cfg.ConfigOpts()
        transport.register_opts(conf)
        conf([], project="rtagent", default_config_files=[])
        # One transport for both ends: the fake driver's queues live in it.
        self._transport = transport.get_transport(conf, url="fake:/")
        on_change = local.prompt.request if local.prompt is not None else None
        self._host = host
        self._endpoint = AgentEndpoint(local.agent, host, local.agent_host_ip, on_change=on_change)
        self._server = RPCServer(self._transport, host, self._endpoint)
        self._server.start()
        super().__init__(AgentClient(self._transport, host, timeout=CALL_TIMEOUT_S))
        self._local = local
        # The served agent, for tests that look at it directly.
        self.agent = local.agent

    @property
    def local(self):
        """The in-process link to the same agent, which reaches it while
        its RPC server does not serve (tests look at its state so)."""
        return self._local

    def audit(self, nodename=None, reading=None):
        self._local.audit(nodename, reading)

    def publish(self, node_uuid):
        self._local.publish(node_uuid)

    def resync(self, node_uuid):
        return self._local.resync(node_uuid)

    def reread(self, nodename):
        # Stands for the daemon's own hypervisor events, as audit() stands
        # for its loop.
        self._local.reread(nodename)

    def stop_serving(self, call_timeout):
        """Stand for a daemon that is down: its RPC server stops, and calls
        give up after ``call_timeout`` seconds (the agent itself stays, as
        the daemon's state directory does)."""
        self._server.stop()
        self._client = AgentClient(self._transport, self._host, timeout=call_timeout)

    def serve_again(self):
        """The daemon back: its RPC server serves again, and whatever the
        transport kept for it while it was down."""
        self._server = RPCServer(self._transport, self._host, self._endpoint)
        self._server.start()
        self._client = AgentClient(self._transport, self._host, timeout=CALL_TIMEOUT_S)

    def close(self):
        self._server.stop()
        self._transport.cleanup()
        self._local.close()
