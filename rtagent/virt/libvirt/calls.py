# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The libvirt calls of one reading: counted, with libvirt errors mapped.

Counting lets a benchmark show that a reading costs a bounded number of
calls whatever the number of domains (design invariant 8). Mapping in one
place keeps the gathering code free of libvirt error handling.
"""

import libvirt

from rtagent.virt import errors
from rtagent.virt.libvirt.connection import is_connection_error, message


class Calls:
    """Makes the libvirt calls of one reading: counts them, maps errors.

    :param connection: the
        :class:`rtagent.virt.libvirt.connection.Connection` to read through.
    """

    def __init__(self, connection):
        self._connection = connection
        self.conn = None
        self.count = 0
        self.opens = 0

    def connect(self):
        """Get the connection; opening it (or trying to) counts as a call.

        :raises rtagent.virt.errors.HypervisorUnavailable: it cannot be opened.
        """
        if not self._connection.is_open:
            self.count += 1
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
        try:
            return self.conn.isAlive() == 1
        except libvirt.libvirtError:
            return False
