"""An HTTP endpoint: ``/healthz`` (200 or 503 with reasons, JSON),
``/metrics`` (Prometheus text) and ``/status`` (the nodes' status, JSON).

Bound to 127.0.0.1 by default: for the local monitoring agent and for
``rtagent status``. ``[health] bind_address`` opens it to a central
Prometheus (docs/operations.md says how to fence it).

Whoever can reach it can use it, so its cost is bounded whatever
clients do: one thread multiplexes every connection (non-blocking sockets,
one selector), a fixed pool of workers builds the answers, at most
``max_connections`` are open (when full, a new connection displaces the
oldest one that has not sent its request within ``EVICT_AFTER_S``), a
request head must arrive whole within ``request_timeout`` seconds and fit
in ``MAX_HEAD`` bytes, and stop closes everything at once. Answers come
from the nodes' published snapshots, never from under a tracker lock.
"""

import collections
import email.utils
import errno
import http
import ipaddress
import itertools
import json
import logging
import queue
import selectors
import socket
import threading
import time

from rtagent.service import prometheus as metricsmod

LOG = logging.getLogger(__name__)
HOST = "127.0.0.1"

WORKERS = 2
# Each connection is a file descriptor; under systemd the agent's soft limit
# is usually 1,024, which its store, libvirt and Placement connections need.
MAX_CONNECTIONS = 128
REQUEST_TIMEOUT_S = 5.0
# A queued request the workers do not answer in time is dropped (the
# ``rtagent status`` client gives up after 10 s anyway).
ANSWER_TIMEOUT_S = 10.0
MAX_LINE = 4096  # the request line
MAX_HEAD = 8192  # request line and headers
# Clients send their request as soon as they are connected; one that has
# not after this long may give its place to a new connection. (A client
# opening 600 connections before writing on any was seen to take 0.4 s.)
# Under a flood, a newcomer waits about backlog / MAX_CONNECTIONS times this.
EVICT_AFTER_S = 0.5
ACCEPT_BATCH = 64
_STOP_JOIN_S = 2.0


class HealthServer:
    """:param check: callable() -> list of reasons (empty when healthy).
    :param metrics: a :class:`rtagent.service.prometheus.Metrics`.
    :param status: callable() -> JSON-able status.
    :param port: TCP port (0: any free port; see ``port``).
    :param host: the IPv4 or IPv6 address to listen on (``::`` also takes
        IPv4 connections).
    :param workers: threads building answers.
    :param max_connections: connections open at once.
    :param request_timeout: seconds for a request head to arrive whole, and
        for an answer to be taken by the client.
    :param clock: monotonic seconds (tests).
    :raises OSError: the port cannot be bound.
    """

    def __init__(
        self,
        check,
        metrics,
        status,
        port,
        *,
        host=HOST,
        workers=WORKERS,
        max_connections=MAX_CONNECTIONS,
        request_timeout=REQUEST_TIMEOUT_S,
        clock=time.monotonic,
    ):
        self._routes = {
            "/healthz": lambda: _healthz(check()),
            "/metrics": lambda: (200, metrics.render(), metricsmod.CONTENT_TYPE),
            "/status": lambda: (200, _json(status()), "application/json"),
        }
        self._workers = workers
        self._max = max_connections
        self._timeout = request_timeout
        self._clock = clock
        self.host = host
        ipv6 = ipaddress.ip_address(host).version == 6
        self._listener = socket.socket(
            socket.AF_INET6 if ipv6 else socket.AF_INET, socket.SOCK_STREAM
        )
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if ipv6:
                # "::" then takes IPv4 too, whatever the host's bindv6only.
                self._listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self._listener.bind((host, port))
            self._listener.listen(max(128, max_connections))
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.port = self._listener.getsockname()[1]
        self._jobs = queue.SimpleQueue()
        self._answers = collections.deque()
        self._waker_r, self._waker_w = socket.socketpair()
        self._waker_r.setblocking(False)
        self._waker_w.setblocking(False)
        self._stopping = False
        self._threads = []

    def start(self):
        loop = _Loop(self)
        self._threads = [threading.Thread(target=loop.run, name="health-http", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"health-worker-{i}", daemon=True)
            for i in range(self._workers)
        ]
        for thread in self._threads:
            thread.start()
        shown = f"[{self.host}]" if ":" in self.host else self.host
        LOG.info("Health and metrics on http://%s:%d/", shown, self.port)

    def stop(self):
        """Close every connection and the port; returns within a few
        seconds even when a worker is stuck in a caller's callable."""
        self._stopping = True
        if not self._threads:
            self._close()
            return
        for _ in range(self._workers):
            self._jobs.put(None)
        self._wake()
        deadline = time.monotonic() + _STOP_JOIN_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                LOG.warning("Health endpoint: %s did not stop", thread.name)

    # -- workers -------------------------------------------------------------

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None or self._stopping:
                return
            key, method, target = job
            self._answers.append((key, self._answer(method, target)))
            self._wake()

    def _answer(self, method, target):
        """The whole response to ``method target``, as bytes."""
        path = target.split("?", 1)[0]
        route = self._routes.get(path)
        try:
            if method != "GET":
                code, body, ctype = 501, _json({"error": "not implemented"}), "application/json"
            elif route is None:
                code, body, ctype = 404, _json({"error": "not found"}), "application/json"
            else:
                code, body, ctype = route()
        except Exception:
            LOG.exception("Health endpoint %s failed", path)
            code, body, ctype = 500, _json({"error": "internal error"}), "application/json"
        LOG.debug("health %s %s %d", method, path, code)
        return _response(code, body, ctype)

    def _wake(self):
        try:
            self._waker_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or closed by stop

    def _close(self):
        for sock in (self._listener, self._waker_r, self._waker_w):
            sock.close()


class _Conn:
    __slots__ = ("buf", "out", "since", "sock")

    def __init__(self, sock, now):
        self.sock = sock
        self.since = now  # start of the current phase
        self.buf = bytearray()
        self.out = b""


class _Loop:
    """The one thread that owns every socket.

    A connection is in one phase at a time: ``reading`` its request head,
    ``waiting`` for a worker's answer, ``writing`` it. Each phase is an
    insertion-ordered dict, so its oldest entry, the next to time out, is
    first.
    """

    def __init__(self, server):
        self.s = server
        self.sel = selectors.DefaultSelector()
        self.keys = itertools.count()
        self.reading, self.waiting, self.writing = {}, {}, {}
        self.listening = False
        self.paused_until = 0.0  # accept() ran out of file descriptors
        # Answers still owed for connections already dropped: they hold
        # their slot, so stuck workers cannot make the job queue grow.
        self.orphans = 0

    def run(self):
        try:
            self.sel.register(self.s._waker_r, selectors.EVENT_READ, "wake")
            while not self.s._stopping:
                self._listen(self._may_accept())
                for key, events in self.sel.select(self._next_timeout()):
                    self._event(key.data, events)
                    if self.s._stopping:
                        break
                self._take_answers()
                self._expire()
        except Exception:
            LOG.exception("Health endpoint loop failed")
        finally:
            for phase in (self.reading, self.waiting, self.writing):
                for conn in phase.values():
                    conn.sock.close()
                phase.clear()
            self.sel.close()
            self.s._close()

    def _open(self):
        return len(self.reading) + len(self.waiting) + len(self.writing) + self.orphans

    def _may_accept(self):
        now = self.s._clock()
        if now < self.paused_until:
            return False
        self.paused_until = 0.0
        return self._open() < self.s._max or self._evictable(now) is not None

    def _evictable(self, now):
        for key, conn in self.reading.items():
            return key if now - conn.since >= EVICT_AFTER_S else None
        return None

    def _listen(self, on):
        if on != self.listening:
            if on:
                self.sel.register(self.s._listener, selectors.EVENT_READ, "accept")
            else:
                self.sel.unregister(self.s._listener)
            self.listening = on

    def _next_timeout(self):
        now = self.s._clock()
        times = [
            conn.since + limit - now
            for phase, limit in (
                (self.reading, self.s._timeout),
                (self.waiting, ANSWER_TIMEOUT_S),
                (self.writing, self.s._timeout),
            )
            for conn in itertools.islice(phase.values(), 1)
        ]
        if self.reading and not self.listening:
            times.append(next(iter(self.reading.values())).since + EVICT_AFTER_S - now)
        if self.paused_until:
            times.append(self.paused_until - now)
        return max(0.0, min(times)) if times else None

    def _event(self, data, events):
        if data == "wake":
            try:
                while self.s._waker_r.recv(4096):
                    pass
            except (BlockingIOError, OSError):
                pass
        elif data == "accept":
            self._accept()
        elif data in self.reading:
            self._read(data)
        elif data in self.writing:
            self._write(data)

    def _accept(self):
        for _ in range(ACCEPT_BATCH):
            now = self.s._clock()
            victim = None
            if self._open() >= self.s._max:
                victim = self._evictable(now)
                if victim is None:
                    return
            try:
                sock, _ = self.s._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    LOG.warning("Health endpoint cannot accept: %s; pausing for 1 s", exc)
                    self.paused_until = now + 1.0
                    self._listen(False)
                return
            if victim is not None:
                LOG.debug("health: dropping an idle connection for a new one")
                self._drop(self.reading, victim)
            sock.setblocking(False)
            key = next(self.keys)
            self.reading[key] = _Conn(sock, now)
            self.sel.register(sock, selectors.EVENT_READ, key)

    def _read(self, key):
        conn = self.reading[key]
        try:
            data = conn.sock.recv(MAX_HEAD + 1 - len(conn.buf))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(self.reading, key)
            return
        conn.buf += data
        request = _parse(conn.buf)
        if request is None:
            return
        del self.reading[key]
        self.sel.unregister(conn.sock)
        conn.since = self.s._clock()
        if isinstance(request, bytes):  # an error response
            self._send(key, conn, request)
        else:
            self.waiting[key] = conn
            self.s._jobs.put((key, *request))

    def _take_answers(self):
        while self.s._answers:
            key, response = self.s._answers.popleft()
            conn = self.waiting.pop(key, None)
            if conn is None:
                self.orphans -= 1
            else:
                conn.since = self.s._clock()
                self._send(key, conn, response)

    def _send(self, key, conn, response):
        conn.out = response
        self.writing[key] = conn
        self.sel.register(conn.sock, selectors.EVENT_WRITE, key)
        self._write(key)

    def _write(self, key):
        conn = self.writing[key]
        try:
            sent = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        except OSError:
            sent = len(conn.out)
        conn.out = conn.out[sent:]
        if not conn.out:
            self._drop(self.writing, key, drain=True)

    def _expire(self):
        now = self.s._clock()
        for phase, limit in (
            (self.reading, self.s._timeout),
            (self.waiting, ANSWER_TIMEOUT_S),
            (self.writing, self.s._timeout),
        ):
            while phase:
                key, conn = next(iter(phase.items()))
                if now - conn.since < limit:
                    break
                LOG.debug("health: connection timed out")
                self._drop(phase, key)
                if phase is self.waiting:
                    self.orphans += 1

    def _drop(self, phase, key, drain=False):
        conn = phase.pop(key)
        if phase is not self.waiting:
            self.sel.unregister(conn.sock)
        if drain:
            # Unread input makes close() send a reset, which can destroy
            # the answer before the client reads it.
            try:
                conn.sock.shutdown(socket.SHUT_WR)
                conn.sock.recv(MAX_HEAD)
            except OSError:
                pass
        conn.sock.close()


def _parse(buf):
    """(method, target) once ``buf`` holds a whole request head; the bytes
    of an error response for a head too long or malformed; None while more
    is to come."""
    line_end = buf.find(b"\n")
    if line_end < 0 or line_end > MAX_LINE:
        too_long = line_end > MAX_LINE or len(buf) > MAX_LINE
        return _error(http.HTTPStatus.REQUEST_URI_TOO_LONG) if too_long else None
    if buf.find(b"\n\r\n") < 0 and buf.find(b"\n\n") < 0:
        too_long = len(buf) > MAX_HEAD
        return _error(http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE) if too_long else None
    words = bytes(buf[:line_end]).split()
    if len(words) == 3 and words[2].startswith(b"HTTP/") and words[1].isascii():
        return words[0].decode("latin-1"), words[1].decode("ascii")
    return _error(http.HTTPStatus.BAD_REQUEST)


def _healthz(reasons):
    body = {"status": "ok" if not reasons else "unhealthy", "reasons": reasons}
    return 200 if not reasons else 503, _json(body), "application/json"


def _error(status):
    return _response(status.value, _json({"error": status.phrase.lower()}), "application/json")


def _response(code, body, content_type):
    try:
        phrase = http.HTTPStatus(code).phrase
    except ValueError:
        phrase = ""
    head = (
        f"HTTP/1.0 {code} {phrase}\r\n"
        "Server: rtagent\r\n"
        f"Date: {email.utils.formatdate(usegmt=True)}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _json(data):
    return (json.dumps(data, sort_keys=True) + "\n").encode("utf-8")
