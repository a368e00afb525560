"""Real parts for the contract tests of docs/rpc-api.md: a private RabbitMQ
and a Placement process per module, and an agent served over them in this
process, its Placement reached through a proxy that can hang.

Without RabbitMQ the tests that need it are skipped, except on CI
(``CI=true``), where a missing broker fails them (as tests/integration does).
"""

import pytest
from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading, session

from rtagent.placement.backoff import SyncBackoff
from rtagent.rpc import transport
from rtagent.rpc.client import AgentClient
from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.rpc.server import RPCServer
from rtagent.service import builder
from rtagent.testing import rabbitmq
from rtagent.testing.faultproxy import FaultProxy
from rtagent.testing.placement_server import PlacementServer
from tests.requirements import require


@pytest.fixture(scope="module")
def broker():
    require(rabbitmq.missing_requirements(), "RPC contract (RabbitMQ)")
    with rabbitmq.RabbitMQ() as rabbit:
        yield rabbit


@pytest.fixture(scope="module")
def placement_server():
    with PlacementServer(db_sync=False) as server:
        yield server


def placement_adapter(endpoint, timeout):
    """What ``[placement]`` with ``auth_type = admin_token`` and ``timeout``
    builds: a keystoneauth1 Adapter whose requests give up after
    ``timeout`` seconds."""
    auth = loading.get_plugin_loader("admin_token").load_from_options(
        endpoint=endpoint,
        token="admin",  # noauth2 takes the token as the user name: not a secret
    )
    return ks_adapter.Adapter(
        session.Session(auth=auth, timeout=timeout),
        service_type="placement",
        endpoint_override=endpoint,
        default_microversion="1.39",
        raise_exc=False,
    )


class Served:
    """An agent (its Placement behind a :class:`FaultProxy`) audited once
    and served over the broker; :meth:`stop` ends all of it."""

    def __init__(self, conf, placement_endpoint, placement_timeout=30):
        self.conf = conf
        self.proxy = FaultProxy(placement_endpoint, upstream_timeout=120)
        self.proxy.start()
        self.agent = None
        self.transport = self.server = None
        try:
            self.agent = builder.build_agent(
                conf,
                adapter=placement_adapter(self.proxy.endpoint, placement_timeout),
                # A failed sync is retried on the next audit, not after a pause.
                make_backoff=lambda: SyncBackoff(window=0),
            )
            self.agent.audit()
            self.transport = transport.get_transport(conf)
            self.endpoint = AgentEndpoint(self.agent, conf.host, conf.my_ip)
            self.server = RPCServer(self.transport, conf.host, self.endpoint)
            self.server.start()
        except BaseException:
            self.stop()
            raise

    @property
    def node_uuid(self):
        return self.agent.tracker.node_uuid

    def client(self, timeout=30):
        return AgentClient(self.transport, self.conf.host, timeout=timeout)

    def stop(self):
        self.proxy.release()
        try:
            if self.server is not None:
                self.server.stop()
            if self.transport is not None:
                self.transport.cleanup()
        finally:
            if self.agent is not None:
                self.agent.close()
            self.proxy.stop()
