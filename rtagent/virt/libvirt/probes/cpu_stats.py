# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""CPU stats probe: the metrics of nova's ``cpu.virt_driver`` monitor.

From two readings of the node's CPU times (``getCPUStats(ALL_CPUS)``,
nanoseconds summed over every CPU since boot) and the CPU frequency
(``getInfo()[3]``, MHz), the same ten metrics, units and rounding as nova's
``nova/compute/monitors/cpu/virt_driver.py`` (``Monitor._update_data``).
"""

import collections

from rtagent.virt.host import HostMetric

# nova's ComputeNode.metrics names the monitor's source after
# [DEFAULT] compute_driver, which is this for a libvirt compute.
SOURCE = "libvirt.LibvirtDriver"

# conn.getInfo() is [model, memory MiB, cpus, mhz, ...].
_INFO_MHZ = 3

CpuTimes = collections.namedtuple("CpuTimes", ["user", "kernel", "idle", "iowait"])
CpuTimes.__doc__ = """The node's CPU times in nanoseconds since boot (all CPUs)."""

_ZERO = CpuTimes(0, 0, 0, 0)

# nova's MonitorMetricType.ALL order (nova itself lists them from a set, in
# no fixed order).
NAMES = (
    "cpu.frequency",
    "cpu.user.time",
    "cpu.kernel.time",
    "cpu.idle.time",
    "cpu.iowait.time",
    "cpu.user.percent",
    "cpu.kernel.percent",
    "cpu.idle.percent",
    "cpu.iowait.percent",
    "cpu.percent",
)


def cpu_times(stats):
    """The :class:`CpuTimes` of a ``getCPUStats`` answer, or None.

    :param stats: ``conn.getCPUStats(VIR_NODE_CPU_STATS_ALL_CPUS, 0)``, a
        dict of nanoseconds; Linux hosts give ``user``, ``kernel``, ``idle``
        and ``iowait`` (nova needs all four; other platforms lack some).
    :returns: None when a time is missing or not a non-negative integer.
    """
    if not isinstance(stats, dict):
        return None
    values = [stats.get(field) for field in CpuTimes._fields]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return None
    return CpuTimes(*values)


def frequency_mhz(info):
    """The CPU frequency in MHz from ``conn.getInfo()``, or None."""
    try:
        mhz = int(info[_INFO_MHZ])
    except (TypeError, ValueError, IndexError):
        return None
    return mhz if mhz >= 0 else None


def cpu_metrics(current, previous, frequency, timestamp, source=SOURCE):
    """nova's CPU monitor metrics for the reading ``current``.

    Times are ``current``'s, in nanoseconds. Percents are the share of each
    time in the CPU time that passed since ``previous``, truncated to an
    integer percent as nova does (``int(delta / elapsed * 100)``);
    ``cpu.percent`` is user + kernel + iowait. Without a usable
    ``previous`` (None: the first reading; a time went backwards: a reboot
    or another host behind the URI; no CPU time passed: a driver with fixed
    counters) the shares are those since boot, as nova's first reading
    gives them. (nova fails the monitor for that tick when no time passed.)

    :param current: :class:`CpuTimes` now.
    :param previous: :class:`CpuTimes` of the reading before, or None.
    :param frequency: MHz (int).
    :param timestamp: naive UTC datetime of the reading.
    :returns: a tuple of :class:`~rtagent.virt.host.HostMetric` in
        :data:`NAMES` order; ``()`` if the host reports no CPU time at all.
    """
    if previous is None or any(c < p for c, p in zip(current, previous, strict=True)):
        previous = _ZERO
    elapsed = float(sum(current) - sum(previous))
    if elapsed <= 0:
        previous = _ZERO
        elapsed = float(sum(current))
    if elapsed <= 0:
        return ()

    def percent(now, before):
        # nova's order of operations (divide, then scale), for its rounding.
        return int((now - before) / elapsed * 100)

    used = current.user + current.kernel + current.iowait
    prev_used = previous.user + previous.kernel + previous.iowait
    values = (
        frequency,
        current.user,
        current.kernel,
        current.idle,
        current.iowait,
        percent(current.user, previous.user),
        percent(current.kernel, previous.kernel),
        percent(current.idle, previous.idle),
        percent(current.iowait, previous.iowait),
        percent(used, prev_used),
    )
    return tuple(
        HostMetric(name, value, timestamp, source)
        for name, value in zip(NAMES, values, strict=True)
    )
