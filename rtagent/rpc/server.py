"""The RPC server: topic ``rtagent``, server name ``[DEFAULT] host``.

oslo.messaging's threading executor runs up to
``[DEFAULT] executor_thread_pool_size`` handlers at once (64 by default).
"""

import logging
import time

from rtagent.rpc import transport

LOG = logging.getLogger(__name__)


class RPCServer:
    """Start and stop serving ``endpoint`` for ``host``.

    :param rpc_transport: an oslo.messaging RPC transport (owned by the caller).
    """

    def __init__(self, rpc_transport, host, endpoint):
        om = transport.messaging()
        self.host = host
        self._server = om.get_rpc_server(
            rpc_transport,
            transport.server_target(host),
            [endpoint],
            access_policy=om.DefaultRPCAccessPolicy,
        )
        self.running = False

    def start(self):
        self._server.start()
        self.running = True
        LOG.info(
            "Serving RPC API %s on topic %s, server %s",
            transport.API_VERSION,
            transport.TOPIC,
            self.host,
        )

    def stop(self):
        """Stop taking calls, then wait for the calls in flight to finish.

        :returns: seconds it took.
        """
        if not self.running:
            return 0.0
        started = time.monotonic()
        self._server.stop()
        self._server.wait()
        self.running = False
        seconds = time.monotonic() - started
        LOG.info("RPC server stopped in %.1f s", seconds)
        return seconds
