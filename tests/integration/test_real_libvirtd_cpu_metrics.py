"""Host CPU metrics from a real libvirtd (QEMU driver): getCPUStats is this
host's /proc/stat, the frequency getInfo()'s, at one call per reading."""

import os
import time

import libvirt
import pytest

from rtagent.virt.libvirt import LibvirtDriver

pytestmark = pytest.mark.integration

# libvirt's Linux node CPU stats, from the "cpu" line of /proc/stat (ticks):
# user = user + nice, kernel = system + irq + softirq, idle, iowait.
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def proc_stat():
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    return {
        "user": (user + nice) * TICK_NS,
        "kernel": (system + irq + softirq) * TICK_NS,
        "idle": idle * TICK_NS,
        "iowait": iowait * TICK_NS,
    }


@pytest.fixture
def driver(libvirtd, tmp_path):
    drv = LibvirtDriver(libvirtd.uri, str(tmp_path), cpu_metrics=True)
    yield drv
    drv.close()


def by_name(view):
    return {m.name: m.value for m in view.metrics}


def burn(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_metrics_are_this_hosts_cpu_times(libvirtd, driver):
    before = proc_stat()
    first = by_name(driver.read_host())
    after = proc_stat()
    for kind in ("user", "kernel", "idle", "iowait"):
        assert before[kind] <= first[f"cpu.{kind}.time"] <= after[kind], kind
    assert first["cpu.frequency"] > 0


def test_percents_over_two_readings(libvirtd, driver):
    driver.read_host()
    burn(0.5)  # some user time between the readings
    view = driver.read_host()
    got = by_name(view)
    assert set(got) == {
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
    }
    parts = [got[f"cpu.{k}.percent"] for k in ("user", "kernel", "idle", "iowait")]
    assert all(0 <= p <= 100 for p in parts)
    # Each share is truncated: together they miss 100 by less than one each.
    assert 96 <= sum(parts) <= 100
    used = got["cpu.user.percent"] + got["cpu.kernel.percent"] + got["cpu.iowait.percent"]
    assert used <= got["cpu.percent"] <= used + 2
    assert got["cpu.user.percent"] > 0
    assert {m.source for m in view.metrics} == {"libvirt.LibvirtDriver"}


def test_one_call_more_per_reading(libvirtd, tmp_path, driver):
    plain = LibvirtDriver(libvirtd.uri, str(tmp_path))
    try:
        for drv in (plain, driver):
            drv.read_host()
            drv.read_host()
        assert driver.last_call_count == plain.last_call_count + 1
        assert plain.read_host().metrics == ()
    finally:
        plain.close()


def test_frequency_is_the_node_infos(libvirtd, driver):
    conn = libvirt.open(libvirtd.uri)
    try:
        mhz = conn.getInfo()[3]
    finally:
        conn.close()
    # The current frequency of a CPU may move between two calls; libvirt
    # reads it from sysfs or /proc/cpuinfo, the same source both times.
    assert abs(by_name(driver.read_host())["cpu.frequency"] - mhz) <= max(mhz, 1) * 0.5
