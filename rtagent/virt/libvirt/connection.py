# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""One lazily opened libvirt connection, reused across readings.

The connection is opened read-write (``libvirt.open``), as nova-compute's
is, although the driver only reads: libvirt refuses
``getDomainCapabilities`` on a read-only connection ("read only access
prevents virConnectGetDomainCapabilities", libvirtd 9.0), and the
capability traits come from it. Every other call the driver makes is
allowed read-only (getInfo, getCPUMap, getCapabilities, baselineCPU,
getAllDomainStats, events, keepalive; checked against libvirtd 9.0 + QEMU
7.2): an operator who injects a read-only opener gets the whole audit but
the domain-capability traits, with a warning.

Connection-level failures drop the connection (see calls.py); the next
reading reopens it. A failed open is retried only after a backoff, and the
hypervisor's availability (``available``, ``unavailable_reason``) is kept
here for the agent's status and claims.
"""

import logging
import threading
import time

import libvirt
import tenacity

from rtagent.pauses import pause
from rtagent.virt import errors

LOG = logging.getLogger(__name__)


def _codes(*names):
    # libvirt-python is built against the host's libvirt, which may predate
    # a constant; a missing one simply cannot occur.
    return frozenset(getattr(libvirt, name) for name in names if hasattr(libvirt, name))


CONNECTION_ERRORS = _codes(
    "VIR_ERR_SYSTEM_ERROR", "VIR_ERR_NO_CONNECT", "VIR_ERR_INVALID_CONN", "VIR_ERR_RPC"
)
UNSUPPORTED = _codes("VIR_ERR_NO_SUPPORT", "VIR_ERR_OPERATION_UNSUPPORTED")
NO_DOMAIN = _codes("VIR_ERR_NO_DOMAIN")
DENIED = _codes("VIR_ERR_OPERATION_DENIED")
# Optional facts (domain capabilities, CPU expansion) that a daemon may fail
# to produce for its own reasons (no emulator for the arch, a CPU model its
# CPU map does not know): the audit goes on without the traits they grant.
OPTIONAL_FAILURES = _codes(
    "VIR_ERR_INTERNAL_ERROR",
    "VIR_ERR_OPERATION_FAILED",
    "VIR_ERR_CONFIG_UNSUPPORTED",
    "VIR_ERR_INVALID_ARG",
    "VIR_ERR_XML_ERROR",
)

_silence_lock = threading.Lock()
_silenced = False


def is_connection_error(code, alive):
    """Tell whether a failed call means the connection is unusable.

    :param code: ``libvirtError.get_error_code()``.
    :param alive: ``conn.isAlive()`` after the failure (False if it raised).
    :returns: True if the connection should be dropped.
    """
    return code in CONNECTION_ERRORS or not alive


def message(exc):
    """Return libvirt's one-line message for a ``libvirtError``."""
    return exc.get_error_message() or str(exc)


def silence_libvirt():
    # Without a handler libvirt prints every error to stderr, even ones we
    # expect and handle (unsupported calls, vanished domains). The handler
    # is process-wide, so install it once.
    global _silenced  # noqa: PLW0603
    with _silence_lock:
        if not _silenced:
            libvirt.registerErrorHandler(lambda *_args: None, None)
            _silenced = True


CLOSE_REASONS = {
    0: "error on the socket",  # VIR_CONNECT_CLOSE_REASON_ERROR
    1: "end of file from libvirtd",  # ..._EOF
    2: "keepalive timeout (libvirtd hung or unreachable)",  # ..._KEEPALIVE
    3: "closed by the client",  # ..._CLIENT
}


class Connection:
    """Holds at most one open connection to ``uri``, shared by readings.

    It also keeps the hypervisor's availability: ``available`` is True while
    a connection is open and answering; after a failure it is False, with
    ``unavailable_reason``, and reopening is attempted again only after a
    backoff (``backoff_min`` doubling up to ``backoff_max`` seconds), so an
    absent libvirtd is not hammered by every reading.

    :param uri: a libvirt connection URI.
    :param opener: ``opener(uri) -> virConnect``; default
        ``libvirt.open``. Tests inject one to count or break opens.
    :param on_open: ``on_open(conn)`` called after each successful open, e.g.
        to set keepalive and register event callbacks; its errors are logged.
    :param clock: monotonic clock, injected by tests.
    """

    def __init__(
        self,
        uri,
        opener=None,
        *,
        on_open=None,
        clock=time.monotonic,
        backoff_min=1.0,
        backoff_max=60.0,
    ):
        self.uri = uri
        self._opener = opener or libvirt.open
        self._on_open = on_open
        self._clock = clock
        # No jitter: one agent per libvirtd, nothing to spread.
        self._backoff = tenacity.wait_exponential(multiplier=backoff_min, max=backoff_max)
        self._conn = None
        self._lost = []  # connections libvirt closed under us, closed on our thread
        self._lock = threading.Lock()
        self.opens = 0
        self.failures = 0  # consecutive failed opens
        self.next_attempt = 0.0
        self.available = False
        self.unavailable_reason = "not connected yet"

    @property
    def is_open(self):
        return self._conn is not None

    @property
    def retry_in(self):
        """Seconds until the next open may be tried (0 if now)."""
        return max(0.0, self.next_attempt - self._clock())

    def get(self):
        """Return the open connection, opening it first if needed.

        :raises rtagent.virt.errors.HypervisorUnavailable: the open failed,
            or the previous one did and the backoff has not passed; the
            message is libvirt's.
        """
        with self._lock:
            self._close_lost()
            if self._conn is not None:
                return self._conn
            wait = self.next_attempt - self._clock()
            if wait > 0:
                raise errors.HypervisorUnavailable(
                    uri=self.uri,
                    reason=f"{self.unavailable_reason}; next attempt in {wait:.1f} s",
                )
            silence_libvirt()
            try:
                conn = self._opener(self.uri)
                if conn is None:
                    raise errors.HypervisorUnavailable(uri=self.uri, reason="open returned None")
            except libvirt.libvirtError as exc:
                self._open_failed(message(exc))
                raise errors.HypervisorUnavailable(uri=self.uri, reason=message(exc)) from exc
            except errors.HypervisorUnavailable:
                self._open_failed("open returned None")
                raise
            self._conn = conn
            self.opens += 1
            self.failures = 0
            self.next_attempt = 0.0
            self.available = True
            self.unavailable_reason = None
        if self._on_open is not None:
            try:
                self._on_open(conn)
            except libvirt.libvirtError as exc:
                LOG.warning("Setting up libvirt connection %s: %s", self.uri, message(exc))
        return conn

    def drop(self, conn, reason="connection failed"):
        """Close ``conn`` if it is still the current connection and mark the
        hypervisor unavailable; the next reading reopens at once."""
        with self._lock:
            if self._conn is conn:
                self._conn = None
                self.available = False
                self.unavailable_reason = reason
                _close_quietly(conn)

    def lost(self, conn, reason):
        """libvirt closed ``conn`` (close callback, event thread): forget it.

        It is closed later on a reading's thread: closing from inside
        libvirt's own callback is not allowed.
        """
        with self._lock:
            if self._conn is conn:
                self._conn = None
                self._lost.append(conn)
                self.available = False
                self.unavailable_reason = f"connection closed: {reason}"

    def close(self):
        """Close the connection, if open. Safe to call more than once."""
        with self._lock:
            conn, self._conn = self._conn, None
            self._close_lost()
        if conn is not None:
            _close_quietly(conn)
        self.available = False
        self.unavailable_reason = "closed"

    def _open_failed(self, reason):
        self.failures += 1
        self.next_attempt = self._clock() + pause(self._backoff, self.failures)
        self.available = False
        self.unavailable_reason = reason

    def _close_lost(self):
        lost, self._lost = self._lost, []
        for conn in lost:
            _close_quietly(conn)


def _close_quietly(conn):
    try:
        conn.close()
    except libvirt.libvirtError:
        # Already broken or closed under us; there is nothing left to free.
        pass
