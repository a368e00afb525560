"""The systemd notify protocol (sd_notify) without libsystemd.

Messages are newline-separated ``KEY=value`` lines sent as one datagram to
the unix socket named by ``NOTIFY_SOCKET`` (a path, or ``@name`` for the
abstract namespace). Without ``NOTIFY_SOCKET`` every call is a no-op, so
the agent runs the same outside systemd.
"""

import logging
import os
import socket

LOG = logging.getLogger(__name__)


class Notifier:
    """:param environ: the environment to read (default ``os.environ``)."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        path = env.get("NOTIFY_SOCKET") or None
        if path and path.startswith("@"):
            path = "\0" + path[1:]
        self._address = path
        self.watchdog_interval = _watchdog_interval(env)

    @property
    def enabled(self):
        return self._address is not None

    def notify(self, **fields):
        """Send ``KEY=value`` fields; False if not under systemd or it failed."""
        if self._address is None:
            return False
        message = "\n".join(f"{key}={value}" for key, value in fields.items())
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                # Never block: a notify socket nobody reads (a full queue) must
                # not freeze the thread that also acts on SIGTERM and SIGHUP.
                sock.setblocking(False)
                sock.sendto(message.encode("utf-8"), self._address)
        except BlockingIOError:
            LOG.debug("systemd notify socket is full; dropped %s", message.split("\n")[0])
            return False
        except OSError as exc:
            # A notify failure must never take the agent down.
            LOG.warning("systemd notify failed: %s", exc)
            return False
        return True

    def ready(self, status):
        return self.notify(READY=1, STATUS=_one_line(status))

    def status(self, status):
        return self.notify(STATUS=_one_line(status))

    def watchdog(self):
        return self.notify(WATCHDOG=1)

    def stopping(self, status="stopping"):
        return self.notify(STOPPING=1, STATUS=_one_line(status))


def _one_line(text):
    return " ".join(str(text).split())


def _watchdog_interval(env):
    """Seconds between WATCHDOG=1 pings (half of WatchdogSec), or None."""
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec:
        return None
    if pid and pid != str(os.getpid()):
        return None  # meant for another process (we were forked from it)
    try:
        return max(0.05, int(usec) / 1e6 / 2)
    except ValueError:
        return None
