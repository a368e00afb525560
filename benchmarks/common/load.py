"""Figures of a recorded request load (benchmarks/fleet.py).

A record is ``(end time, agent, method, url, status or None, seconds)``,
as :class:`benchmarks.common.fleet.Recorder` keeps them.
"""

import collections
import re

from rtagent.testing import proc


def answered(records):
    return [r for r in records if r[4] is not None]


def peak(records, width):
    """Most requests in any window of ``width`` seconds."""
    times = sorted(r[0] for r in records)
    best, first = 0, 0
    for last, t in enumerate(times):
        while times[first] <= t - width:
            first += 1
        best = max(best, last - first + 1)
    return best


_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def kinds(records):
    """What the requests were: ``METHOD path`` (UUIDs as {id}, no query)
    with counts, most frequent first."""
    found = collections.Counter(f"{r[2]}_{_ID.sub('{id}', r[3].split('?')[0])}" for r in records)
    return ",".join(f"{kind}:{n}" for kind, n in found.most_common(6))


def percentile(values, q):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency(records):
    seconds = [r[5] for r in answered(records)]
    return (
        f"latency_n={len(seconds)} p50_ms={1000 * percentile(seconds, 0.5):.1f} "
        f"p99_ms={1000 * percentile(seconds, 0.99):.1f} "
        f"max_ms={1000 * max(seconds, default=0):.1f}"
    )


def postgres_cpu(pg):
    """PostgreSQL's CPU seconds: the postmaster, its live children and the
    children it reaped."""
    live = sum(proc.cpu_seconds(pid) for pid in proc.children(pg.pid))
    return proc.cpu_seconds(pg.pid) + live + proc.reaped_children_cpu_seconds(pg.pid)


def cpu_delta(before, after):
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())
