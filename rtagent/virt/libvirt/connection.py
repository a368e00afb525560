# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""One lazily opened libvirt connection, reused across readings.

The connection is opened read-only (``libvirt.openReadOnly``): the driver
only reads, so it should not hold a handle that could change the host; on a
real daemon the read-only socket is also open to unprivileged users, so the
agent need not run with libvirt's management rights. Every call the driver
makes is allowed read-only (getInfo, getCPUMap, getAllDomainStats with the
vcpu and balloon groups, domain info; checked against libvirtd 9.0 + QEMU
7.2), so nothing is lost.

Connection-level failures drop the connection (see calls.py); the next
reading reopens it.
"""

import threading

import libvirt

from rtagent.virt import errors


def _codes(*names):
    # libvirt-python is built against the host's libvirt, which may predate
    # a constant; a missing one simply cannot occur.
    return frozenset(getattr(libvirt, name) for name in names if hasattr(libvirt, name))


CONNECTION_ERRORS = _codes(
    "VIR_ERR_SYSTEM_ERROR", "VIR_ERR_NO_CONNECT", "VIR_ERR_INVALID_CONN", "VIR_ERR_RPC"
)
UNSUPPORTED = _codes("VIR_ERR_NO_SUPPORT", "VIR_ERR_OPERATION_UNSUPPORTED")
NO_DOMAIN = _codes("VIR_ERR_NO_DOMAIN")

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


def _silence_libvirt():
    # Without a handler libvirt prints every error to stderr, even ones we
    # expect and handle (unsupported calls, vanished domains). The handler
    # is process-wide, so install it once.
    global _silenced  # noqa: PLW0603
    with _silence_lock:
        if not _silenced:
            libvirt.registerErrorHandler(lambda *_args: None, None)
            _silenced = True


class Connection:
    """Holds at most one open connection to ``uri``, shared by readings.

    :param uri: a libvirt connection URI.
    :param opener: ``opener(uri) -> virConnect``; default
        ``libvirt.openReadOnly``. Tests inject one to count or break opens.
    """

    def __init__(self, uri, opener=None):
        self.uri = uri
        self._opener = opener or libvirt.openReadOnly
        self._conn = None
        self._lock = threading.Lock()
        self.opens = 0

    @property
    def is_open(self):
        return self._conn is not None

    def get(self):
        """Return the open connection, opening it first if needed.

        :raises rtagent.virt.errors.HypervisorUnavailable: the open failed;
            the message is libvirt's.
        """
        with self._lock:
            if self._conn is None:
                _silence_libvirt()
                try:
                    conn = self._opener(self.uri)
                except libvirt.libvirtError as exc:
                    raise errors.HypervisorUnavailable(uri=self.uri, reason=message(exc)) from exc
                if conn is None:
                    raise errors.HypervisorUnavailable(uri=self.uri, reason="open returned None")
                self._conn = conn
                self.opens += 1
            return self._conn

    def drop(self, conn):
        """Close ``conn`` if it is still the current connection."""
        with self._lock:
            if self._conn is conn:
                self._conn = None
                _close_quietly(conn)

    def close(self):
        """Close the connection, if open. Safe to call more than once."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            _close_quietly(conn)


def _close_quietly(conn):
    try:
        conn.close()
    except libvirt.libvirtError:
        # Already broken or closed under us; there is nothing left to free.
        pass
