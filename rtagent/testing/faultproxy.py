"""A keep-alive HTTP front on loopback that loses connections on demand.

Example::

    with PlacementServer() as placement, FaultProxy(placement.endpoint) as proxy:
        client = admin_adapter(proxy.endpoint)
        client.get("/")                  # opens client connection 1
        proxy.drop_next_reused()
        client.get("/resource_providers")  # on connection 1: closed, no answer

Why not a byte-for-byte TCP relay: the Placement test server
(:mod:`rtagent.testing.placement_wsgi`) answers HTTP/1.0 and closes every
connection, so through a plain relay a client never holds a kept-alive
connection that could go stale. This proxy plays the keep-alive front that
production puts before Placement (Apache, uwsgi, HAProxy): HTTP/1.1 with
keep-alive towards the client, one upstream connection per request.

:meth:`FaultProxy.hold` plays a Placement that hangs: requests are taken
and left unanswered (not forwarded) until :meth:`FaultProxy.release`.

The fault is what a front's keep-alive idle timeout does to a client's pooled
connection when the timeout fires just as the client reuses it: the request
goes out and the connection ends with no answer. ``close`` ends it with a FIN
(the client sees ``RemoteDisconnected``), ``reset`` with an RST
(``ConnectionResetError``). By default the request is dropped before it
reaches the server; ``forward=True`` lets it reach the server and drops the
answer (the request took effect, the client cannot know).

One thread per client connection; :meth:`FaultProxy.stop` closes every
connection and joins every thread. Listens on 127.0.0.1 only, on a free port.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import socket
import socketserver
import struct
import threading
import urllib.parse

CLOSE = "close"
RESET = "reset"
FORWARDED = "forwarded"
BAD_GATEWAY = "bad_gateway"

# Headers that describe one hop, not the message; Content-Length is recomputed.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
    }
)


@dataclasses.dataclass(frozen=True)
class Exchange:
    """One request the proxy received.

    :param connection: number of the client connection it arrived on
        (1-based, in accept order).
    :param outcome: ``forwarded``, ``bad_gateway`` (the server could not be
        reached), or the fault mode (``close`` / ``reset``).
    :param reached_server: True if the server received the request.
    """

    connection: int
    method: str
    path: str
    outcome: str
    reached_server: bool


@dataclasses.dataclass(frozen=True)
class _Fault:
    mode: str
    forward: bool
    method: str | None


class FaultProxy:
    """An HTTP/1.1 keep-alive proxy to ``upstream``; a context manager.

    :param upstream: ``http://HOST:PORT`` of the server (no path).
    :param idle_timeout: seconds a client connection may stay idle before the
        proxy closes it.
    :param upstream_timeout: seconds to wait for the server's answer.

    Attributes after :meth:`start`: ``endpoint`` (``http://127.0.0.1:PORT``),
    ``port``.
    """

    def __init__(self, upstream, idle_timeout=60.0, upstream_timeout=30.0):
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or not parsed.port or parsed.path not in ("", "/"):
            raise ValueError(f"upstream must be http://HOST:PORT, not {upstream!r}")
        self._upstream = (parsed.hostname, parsed.port)
        self.idle_timeout = idle_timeout
        self.upstream_timeout = upstream_timeout
        self.endpoint = None
        self.port = None
        self._lock = threading.Lock()
        self._faults = []
        self._exchanges = []
        self._arrived = []
        self._open = {}
        self._accepted = 0
        self._server = None
        self._thread = None
        # Set: requests pass. Cleared by hold(); set again by release/stop.
        self._flowing = threading.Event()
        self._flowing.set()
        self._stopping = False

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def start(self):
        """Listen on a free loopback port and serve in a background thread."""
        if self._server is not None:
            raise RuntimeError("already started")
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.proxy = self
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"faultproxy-{self.port}",
        )
        self._thread.start()

    def stop(self):
        """Stop listening, close every client connection, join every thread;
        idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping = True
        self._flowing.set()  # held requests end (unanswered) instead of waiting
        server.shutdown()
        self._thread.join()
        with self._lock:
            sockets = list(self._open.values())
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by its handler
        server.server_close()  # joins the connection threads

    # -- faults and observations -------------------------------------------

    def drop_next_reused(self, count=1, mode=CLOSE, forward=False, method=None):
        """Make the next ``count`` requests that arrive on an already-used
        client connection fail: the connection ends without an answer.

        :param mode: ``close`` (FIN) or ``reset`` (RST).
        :param forward: send the request to the server first, then drop its
            answer.
        :param method: only requests with this method (e.g. ``"PUT"``).
        """
        if mode not in (CLOSE, RESET):
            raise ValueError(f"mode must be {CLOSE!r} or {RESET!r}, not {mode!r}")
        with self._lock:
            self._faults.extend([_Fault(mode, forward, method)] * count)

    def hold(self):
        """From now on, leave every request unanswered: it waits, not
        forwarded, until :meth:`release` (then it is forwarded) or
        :meth:`stop` (then its connection closes without an answer)."""
        self._flowing.clear()

    def release(self):
        """Forward held requests and the ones to come."""
        self._flowing.set()

    @property
    def pending_faults(self):
        """Faults armed and not yet used."""
        with self._lock:
            return len(self._faults)

    @property
    def exchanges(self):
        """Every request received, in order (a copy)."""
        with self._lock:
            return list(self._exchanges)

    @property
    def arrived(self):
        """Every request received, as (method, path), in order of arrival:
        also those held or still in flight, which :attr:`exchanges` records
        only once they end (a copy)."""
        with self._lock:
            return list(self._arrived)

    @property
    def connections(self):
        """Client connections accepted so far."""
        with self._lock:
            return self._accepted

    def clear(self):
        """Forget the recorded exchanges and arrivals (connection numbers
        keep counting)."""
        with self._lock:
            self._exchanges = []
            self._arrived = []

    # -- used by the handler -----------------------------------------------

    def _opened(self, sock):
        with self._lock:
            self._accepted += 1
            self._open[self._accepted] = sock
            return self._accepted

    def _closed(self, number):
        with self._lock:
            self._open.pop(number, None)

    def _take_fault(self, method):
        with self._lock:
            for i, fault in enumerate(self._faults):
                if fault.method in (None, method):
                    return self._faults.pop(i)
        return None

    def _record(self, exchange):
        with self._lock:
            self._exchanges.append(exchange)


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    # Not http.server.HTTPServer: its server_bind does a reverse DNS lookup.
    daemon_threads = False
    block_on_close = True
    proxy: FaultProxy


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.timeout = self.server.proxy.idle_timeout
        super().setup()
        self._number = self.server.proxy._opened(self.connection)
        self._served = 0

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.proxy._closed(self._number)

    def log_message(self, fmt, *args):
        pass

    def _relay(self):
        proxy = self.server.proxy
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.send_error(501, "chunked request bodies are not supported")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        with proxy._lock:
            proxy._arrived.append((self.command, self.path))
        proxy._flowing.wait()
        if proxy._stopping:
            self._drop(CLOSE)
            return
        self._served += 1
        fault = proxy._take_fault(self.command) if self._served > 1 else None
        if fault is not None and not fault.forward:
            proxy._record(Exchange(self._number, self.command, self.path, fault.mode, False))
            self._drop(fault.mode)
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*proxy._upstream, timeout=proxy.upstream_timeout)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            proxy._record(Exchange(self._number, self.command, self.path, BAD_GATEWAY, False))
            self.send_error(502, f"upstream: {exc}")
            return
        finally:
            upstream.close()
        if fault is not None:
            proxy._record(Exchange(self._number, self.command, self.path, fault.mode, True))
            self._drop(fault.mode)
            return
        proxy._record(Exchange(self._number, self.command, self.path, FORWARDED, True))
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP:
                self.send_header(name, value)
        if response.status >= 200 and response.status not in (204, 304):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # http.server dispatches on these names.
    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _relay  # noqa: N815

    def _drop(self, mode):
        """End the connection with no answer."""
        self.close_connection = True
        if mode == RESET:
            # Linger 0: the close sends an RST. The server's own shutdown
            # afterwards would send a FIN first, so close here.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
