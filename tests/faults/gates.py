"""The test's side of the virt driver's gates (tests/cloud/virt.py) and
of the log lines a fault waits for: a step armed in a host's gates
directory waits, with a log line, until the test opens it. A fault lands
once the line it waited for is in the log, and that line is kept as the
evidence of when it landed.
"""

import glob
import os
import re
import time

from tests.cloud.services import wait_for

LINE_BOUND_S = 90


class Gates:
    """One host's gates directory."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)

    def arm(self, step):
        open(os.path.join(self.dir, f"{step}.armed"), "w").close()

    def open(self, step):
        open(os.path.join(self.dir, f"{step}.open"), "w").close()

    def clear(self):
        """Disarm what no step took, and forget openings nobody waited for
        (a step killed while it waited)."""
        for path in glob.glob(os.path.join(self.dir, "*.armed")) + glob.glob(
            os.path.join(self.dir, "*.open")
        ):
            os.unlink(path)


class LogWatch:
    """The lines a service writes from now on (its log is appended to
    across restarts)."""

    def __init__(self, service):
        self.service = service
        try:
            self.offset = os.path.getsize(service.log_path)
        except OSError:
            self.offset = 0

    def lines(self):
        try:
            with open(self.service.log_path, "rb") as f:
                f.seek(self.offset)
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return []

    def find(self, pattern):
        regex = re.compile(pattern)
        return next((line for line in self.lines() if regex.search(line)), None)


def wait_line(watches, pattern, what, bound=LINE_BOUND_S, services=()):
    """The first line matching ``pattern`` any of ``watches`` sees, within
    ``bound`` s: ``(watch, line)``."""

    def found():
        for watch in watches:
            line = watch.find(pattern)
            if line:
                return watch, line
        return None

    return wait_for(found, what, bound, services, poll=0.1)


def stamp():
    return time.strftime("%H:%M:%S")
