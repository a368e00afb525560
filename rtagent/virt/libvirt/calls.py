# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The libvirt calls of one reading: counted, observed, with errors mapped.

Counting lets a benchmark show that a reading costs a bounded number of
calls whatever the number of domains (design invariant 8). Mapping in one
place keeps the gathering code free of libvirt error handling. Every call
first goes past a :class:`CallObserver`, so that a test can prove no libvirt
call is made with a tracker lock held (design invariant 1), as the Placement
client's ``RequestObserver`` does for HTTP.
"""

import libvirt

from rtagent.virt import errors
from rtagent.virt.libvirt.connection import is_connection_error, message


class CallObserver:
    """Hook run on the calling thread just before each libvirt call.

    ``what`` names the call (the fact being read, or ``"open connection"``,
    ``"close connection"``...). It may raise to stop the call.
    """

    def before(self, what):
        pass


_NO_OBSERVER = CallObserver()


class Calls:
    """Makes the libvirt calls of one reading: counts them, maps errors.

    :param connection: the
        :class:`rtagent.virt.libvirt.connection.Connection` to read through.
    :param observer: a :class:`CallObserver`, or None.
    """

    def __init__(self, connection, observer=None):
        self._connection = connection
        self._observer = observer or _NO_OBSERVER
        self.conn = None
        self.count = 0
        self.opens = 0

    def connect(self):
        """Get the connection; opening it (or trying to) counts as a call.

        :raises rtagent.virt.errors.HypervisorUnavailable: it cannot be opened.
        """
        if not self._connection.is_open:
            self.count += 1
            self._observer.before("open connection")
        else:
            # Not counted (usually no call), but getting an open connection
            # may close one libvirt dropped under us: observed all the same.
            self._observer.before("reuse connection")
        self.conn = self._connection.get()
        self.opens = self._connection.opens
        return self.conn

    def __call__(self, what, fn, *args, tolerate=frozenset()):
        """Return ``fn(*args)``, or None if it failed with a code in ``tolerate``.

        :param what: the fact being read, for error messages.
        :raises rtagent.virt.errors.HypervisorUnavailable: a connection-level
            failure; the connection is dropped so the next reading reopens.
        :raises rtagent.virt.errors.HostReadError: any other libvirt failure.
        """
        self.count += 1
        self._observer.before(what)
        try:
            return fn(*args)
        except libvirt.libvirtError as exc:
            code = exc.get_error_code()
            if is_connection_error(code, self._alive()):
                self._connection.drop(self.conn, reason=message(exc))
                raise errors.HypervisorUnavailable(
                    uri=self._connection.uri, reason=message(exc)
                ) from exc
            if code in tolerate:
                return None
            raise errors.HostReadError(what=what, reason=message(exc)) from exc

    def _alive(self):
        self.count += 1
        self._observer.before("connection alive")
        try:
            return self.conn.isAlive() == 1
        except libvirt.libvirtError:
            return False
