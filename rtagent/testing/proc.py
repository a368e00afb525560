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


def cpu_seconds(pid):
    """CPU seconds process ``pid`` has used so far (0.0 once it is gone):
    the sum of its threads' run time from ``/proc/<pid>/task/*/schedstat``
    (nanoseconds), or utime+stime from ``/proc/<pid>/stat`` (clock ticks)
    where schedstat is missing."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{task}"):
                continue  # a thread that just ended
            return _stat_seconds(pid, children=False)
    return total / 1e9


def reaped_children_cpu_seconds(pid):
    """CPU seconds of the children ``pid`` has waited for (cutime+cstime)."""
    return _stat_seconds(pid, children=True)


def _stat_seconds(pid, children):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    # After the command: state is field 3, utime/stime 14-15, cutime/cstime 16-17.
    ticks = fields[13:15] if children else fields[11:13]
    return sum(int(x) for x in ticks) / os.sysconf("SC_CLK_TCK")


def children(pid):
    """PIDs whose parent is ``pid`` now (a scan of /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def start_time(pid):
    """When ``pid`` started (clock ticks after boot), or None if it is gone:
    with the PID, it names one process even after the PID is reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError):
        return None
