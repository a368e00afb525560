"""A small client of the RPC API, for tools, tests and benchmarks.

A conductor in another codebase does the same with oslo.messaging alone::

    target = oslo_messaging.Target(
        exchange="rtagent", topic="rtagent", server=HOST, version="1.6"
    )
    client = oslo_messaging.get_rpc_client(transport, target, timeout=30)
    reply = client.call({}, "instance_claim", instance_uuid=..., flavor={...})
    if not reply["ok"]:
        handle(reply["error"]["code"])
"""

from rtagent.rpc import transport


class AgentClient:
    """Calls one agent (``host``) over ``rpc_transport``.

    :param timeout: seconds before a call raises MessagingTimeout.
    :param retry: reconnection attempts while the broker is unreachable
        (None: forever, as oslo.messaging does by default).
    """

    def __init__(self, rpc_transport, host, timeout=30, retry=None):
        om = transport.messaging()
        target = om.Target(
            exchange=transport.EXCHANGE,
            topic=transport.TOPIC,
            server=host,
            version=transport.API_VERSION,
        )
        self._client = om.get_rpc_client(rpc_transport, target, timeout=timeout, retry=retry)

    def call(self, method, **args):
        """The reply envelope: ``{"ok": True, "result": ...}`` or
        ``{"ok": False, "error": {...}}`` (see docs/rpc-api.md)."""
        return self._client.call({}, method, **args)

    def cast(self, method, **args):
        self._client.cast({}, method, **args)
