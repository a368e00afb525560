"""Small helpers shared by the launchers of real services in this package."""

import os

LOG_TAIL_BYTES = 4096


def tail(path, limit=LOG_TAIL_BYTES):
    """The last ``limit`` bytes of ``path`` as text ('' if unreadable), for
    error messages that say why a service did not start."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""
