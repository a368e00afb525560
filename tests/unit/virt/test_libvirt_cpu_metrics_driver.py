"""LibvirtDriver's host CPU metrics over the hand-written fake connection:
one call per reading when on, none when off, percents over two readings,
absent (not an error, said once) where libvirt cannot give them."""

import datetime
import logging

import libvirt
import pytest

from rtagent.virt import errors
from tests.unit.virt.test_libvirt_driver_unit import (
    READING,
    STATIC,
    STEADY,
    FakeConn,
    lv_error,
    make_driver,
)

T0 = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)
STATS = [
    {"user": 3000, "kernel": 2000, "idle": 4500, "iowait": 500},
    # +100 user, +100 kernel, +700 idle, +100 iowait
    {"user": 3100, "kernel": 2100, "idle": 5200, "iowait": 600},
]


class StatsConn(FakeConn):
    """A FakeConn that also answers getCPUStats, one answer per reading."""

    def __init__(self, answers=STATS, **kw):
        super().__init__(**kw)
        self.answers = list(answers)
        self.asked = []

    def getCPUStats(self, cpu, flags):
        self.asked.append((cpu, flags))
        return self._answer("getCPUStats", self.answers.pop(0) if self.answers else {})


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        now, self.now = self.now, self.now + datetime.timedelta(seconds=60)
        return now


def by_name(view):
    return {m.name: m.value for m in view.metrics}


def test_metrics_cost_one_call_and_percents_come_from_deltas():
    conn = StatsConn()
    driver, _ = make_driver(conn, cpu_metrics=True, utcnow=Clock())
    first = driver.read_host()
    assert driver.last_call_count == 1 + READING + STATIC + 1
    assert conn.asked == [(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0)]
    # The first reading: shares since boot, as nova's first reading.
    assert by_name(first)["cpu.user.percent"] == 30
    assert by_name(first)["cpu.frequency"] == 2600  # getInfo()[3]
    second = driver.read_host()
    assert driver.last_call_count == STEADY + 1
    assert by_name(second) == {
        "cpu.frequency": 2600,
        "cpu.user.time": 3100,
        "cpu.kernel.time": 2100,
        "cpu.idle.time": 5200,
        "cpu.iowait.time": 600,
        "cpu.user.percent": 10,
        "cpu.kernel.percent": 10,
        "cpu.idle.percent": 70,
        "cpu.iowait.percent": 10,
        "cpu.percent": 30,
    }
    assert {m.timestamp for m in first.metrics} == {T0}
    assert {m.timestamp for m in second.metrics} == {T0 + datetime.timedelta(seconds=60)}
    assert {m.source for m in second.metrics} == {"libvirt.LibvirtDriver"}
    # Metrics alone do not make a reading differ (the tracker keeps its state).
    assert first == second


def test_off_by_default_no_call_no_metrics():
    conn = StatsConn()
    driver, _ = make_driver(conn)
    assert driver.read_host().metrics == ()
    assert driver.last_call_count == 1 + READING + STATIC
    assert conn.asked == []


@pytest.mark.parametrize(
    "failure",
    [
        lv_error(libvirt.VIR_ERR_NO_SUPPORT, "this function is not supported"),
        lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, "cannot parse /proc/stat"),
        lv_error(libvirt.VIR_ERR_OPERATION_FAILED, "failed"),
    ],
)
def test_unavailable_stats_leave_metrics_out_and_are_logged_once(failure, caplog):
    conn = StatsConn(fail={"getCPUStats": failure})
    driver, _ = make_driver(conn, cpu_metrics=True)
    with caplog.at_level(logging.INFO, logger="rtagent.virt.libvirt.driver"):
        views = [driver.read_host() for _ in range(3)]
    assert [v.metrics for v in views] == [(), (), ()]
    assert views[0].vcpus == 6  # the reading itself is fine
    said = [r for r in caplog.records if "No host CPU metrics" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert conn.calls.count("getCPUStats") == 3


def test_metrics_come_back_and_that_is_said(caplog):
    conn = StatsConn(answers=[{"user": 1, "kernel": 1, "idle": 1}, *STATS])  # no iowait
    driver, _ = make_driver(conn, cpu_metrics=True)
    with caplog.at_level(logging.INFO, logger="rtagent.virt.libvirt.driver"):
        assert driver.read_host().metrics == ()
        assert by_name(driver.read_host())["cpu.user.percent"] == 30
    messages = [r.getMessage() for r in caplog.records]
    assert any("unexpected CPU stats" in m for m in messages)
    assert any("metrics from qemu:///system available" in m for m in messages)


def test_a_lost_connection_during_the_stats_fails_the_reading():
    conn = StatsConn(
        fail={"getCPUStats": lv_error(libvirt.VIR_ERR_RPC, "Cannot write data: Broken pipe")}
    )
    driver, _ = make_driver(conn, StatsConn(), cpu_metrics=True)
    with pytest.raises(errors.HypervisorUnavailable):
        driver.read_host()
    assert conn.closed
    assert by_name(driver.read_host())["cpu.frequency"] == 2600
