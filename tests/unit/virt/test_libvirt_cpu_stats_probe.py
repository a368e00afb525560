"""The CPU stats probe: nova's cpu.virt_driver metrics from pure values.

Expected values follow nova's Monitor._update_data
(nova/compute/monitors/cpu/virt_driver.py): times as given (ns), percents
int(delta / elapsed * 100) over the CPU time since the previous reading,
cpu.percent = user + kernel + iowait, and MonitorMetric.to_dict's fractions.
"""

import datetime

import pytest

from rtagent.tracker import view
from rtagent.virt.host import HostMetric
from rtagent.virt.libvirt.probes import cpu_stats
from rtagent.virt.libvirt.probes.cpu_stats import CpuTimes

T = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)

# The libvirt test driver's fixed answer (libvirt 9.0), and a later reading.
TEST_DRIVER = CpuTimes(user=9797400000, kernel=34678723400000, idle=87264900000, iowait=763600000)
LATER = CpuTimes(user=9797400000 + 30, kernel=34678723400000 + 20, idle=87264900000 + 45,
                 iowait=763600000 + 5)  # fmt: skip


def values(metrics):
    return {m.name: m.value for m in metrics}


def percents(metrics):
    return tuple(values(metrics)[n] for n in cpu_stats.NAMES[5:])


@pytest.mark.parametrize(
    "current, previous, expected",
    [
        pytest.param(
            CpuTimes(300, 200, 450, 50),
            CpuTimes(0, 0, 0, 0),
            (30, 20, 45, 5, 55),
            id="even-shares",
        ),
        pytest.param(LATER, TEST_DRIVER, (30, 20, 45, 5, 55), id="deltas-not-totals"),
        pytest.param(
            # 29 / 100 * 100 is 28.999999999999996 in floating point: nova
            # truncates it to 28, and so do we.
            CpuTimes(129, 100, 171, 100),
            CpuTimes(100, 100, 100, 100),
            (28, 0, 71, 0, 28),
            id="nova-truncation",
        ),
        pytest.param(
            CpuTimes(1, 1, 1, 0), CpuTimes(0, 0, 0, 0), (33, 33, 33, 0, 66), id="thirds-truncate"
        ),
        pytest.param(TEST_DRIVER, None, (0, 99, 0, 0, 99), id="first-reading-shares-since-boot"),
        pytest.param(
            TEST_DRIVER, TEST_DRIVER, (0, 99, 0, 0, 99), id="no-time-passed-shares-since-boot"
        ),
        pytest.param(
            CpuTimes(10, 10, 70, 10),
            CpuTimes(500, 5, 5, 5),  # user went backwards: a reboot, another host
            (10, 10, 70, 10, 30),
            id="counters-went-back-shares-since-boot",
        ),
    ],
)
def test_percents_as_nova_computes_them(current, previous, expected):
    assert percents(cpu_stats.cpu_metrics(current, previous, 2600, T)) == expected


def test_every_metric_named_as_nova_with_times_in_ns_and_source():
    got = cpu_stats.cpu_metrics(LATER, TEST_DRIVER, 1400, T)
    assert [m.name for m in got] == list(cpu_stats.NAMES)
    assert values(got) == {
        "cpu.frequency": 1400,
        "cpu.user.time": 9797400030,
        "cpu.kernel.time": 34678723400020,
        "cpu.idle.time": 87264900045,
        "cpu.iowait.time": 763600005,
        "cpu.user.percent": 30,
        "cpu.kernel.percent": 20,
        "cpu.idle.percent": 45,
        "cpu.iowait.percent": 5,
        "cpu.percent": 55,
    }
    assert {(m.timestamp, m.source) for m in got} == {(T, "libvirt.LibvirtDriver")}


def test_no_cpu_time_at_all_gives_no_metrics():
    assert cpu_stats.cpu_metrics(CpuTimes(0, 0, 0, 0), None, 2600, T) == ()


def test_to_list_is_novas_monitor_metric_list_to_list():
    got = view.metrics_list(cpu_stats.cpu_metrics(CpuTimes(129, 100, 171, 100), None, 2600, T))
    assert got[0] == {
        "name": "cpu.frequency",
        "timestamp": "2024-05-06T07:08:09.123456",
        "source": "libvirt.LibvirtDriver",
        "value": 2600,
    }
    assert list(got[0]) == ["name", "timestamp", "source", "value"]  # to_dict's order
    by_name = {m["name"]: m["value"] for m in got}
    assert by_name["cpu.user.time"] == 129  # ns, unchanged
    assert by_name["cpu.user.percent"] == 0.25  # 25 -> 0.25 as nova's to_dict
    assert by_name["cpu.percent"] == 0.65
    assert view.metrics_list(()) == []


def test_metric_values_are_immutable():
    metric = HostMetric("cpu.frequency", 1, T, "x")
    with pytest.raises(AttributeError):
        metric.value = 2


@pytest.mark.parametrize(
    "stats, expected",
    [
        ({"user": 1, "kernel": 2, "idle": 3, "iowait": 4}, CpuTimes(1, 2, 3, 4)),
        # FreeBSD-like answers carry intr and no iowait: nova needs iowait.
        ({"user": 1, "kernel": 2, "idle": 3, "intr": 4}, None),
        ({"user": 1, "kernel": 2, "idle": 3, "iowait": -1}, None),
        ({"user": 1, "kernel": 2, "idle": 3, "iowait": "4"}, None),
        ({"user": 1, "kernel": 2, "idle": 3, "iowait": True}, None),
        (None, None),
        ([1, 2, 3, 4], None),
    ],
)
def test_cpu_times_from_get_cpu_stats(stats, expected):
    assert cpu_stats.cpu_times(stats) == expected


@pytest.mark.parametrize(
    "info, expected",
    [
        (["x86_64", 65536, 8, 2600, 1, 1, 4, 2], 2600),
        (["x86_64", 65536, 8], None),
        (["x86_64", 65536, 8, "fast"], None),
        (["x86_64", 65536, 8, -1], None),
        (None, None),
    ],
)
def test_frequency_from_node_info(info, expected):
    assert cpu_stats.frequency_mhz(info) == expected
