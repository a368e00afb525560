# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""libvirt's event loop in a daemon thread: lifecycle events and keepalive.

libvirt delivers domain events, close callbacks and keepalive pings only
through a registered event loop, and ``virEventRegisterDefaultImpl`` must be
called *before* a connection is opened for the connection to use it. The
loop is process-wide and lives until the process ends (libvirt offers no way
to unregister it), so :func:`start` is idempotent.

Callbacks run on this thread. They must be quick and must not call back into
libvirt synchronously; the driver's only set flags and call the agent's
``trigger()``.
"""

import logging
import threading

import libvirt

LOG = logging.getLogger(__name__)

_lock = threading.Lock()
_thread = None


def start():
    """Register libvirt's default event loop and run it in a daemon thread.

    :returns: True (the loop runs after the first call).
    """
    global _thread  # noqa: PLW0603
    with _lock:
        if _thread is None:
            libvirt.virEventRegisterDefaultImpl()
            _thread = threading.Thread(target=_run, name="libvirt-events", daemon=True)
            _thread.start()
    return True


def running():
    """Tell whether the loop thread runs."""
    return _thread is not None and _thread.is_alive()


def _run():
    while True:
        try:
            libvirt.virEventRunDefaultImpl()
        except Exception:
            # One bad callback must not end event delivery for the process.
            LOG.exception("libvirt event loop iteration failed; continuing")
