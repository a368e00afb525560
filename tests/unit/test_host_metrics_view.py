"""Host metrics in the tracker and the compute-node view: carried from the
last reading, never part of the node's state, listed as nova lists them."""

import dataclasses
import datetime

import pytest

from rtagent.virt import errors
from rtagent.virt.host import HostMetric
from tests.unit.helpers import HOST, make_tracker

T = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)


def reading(at, percent=37, mhz=2600):
    metrics = (
        HostMetric("cpu.frequency", mhz, at, "libvirt.LibvirtDriver"),
        HostMetric("cpu.percent", percent, at, "libvirt.LibvirtDriver"),
    )
    return dataclasses.replace(HOST, metrics=metrics)


@pytest.fixture
def tracker(tmp_path):
    tracker, store = make_tracker(tmp_path)
    yield tracker
    store.close()


def test_view_lists_the_last_readings_metrics_as_nova(tracker):
    tracker.update_host(reading(T))
    got = tracker.compute_node_view("192.0.2.1")["metrics"]
    assert got == [
        {
            "name": "cpu.frequency",
            "timestamp": "2024-05-06T07:08:09.123456",
            "source": "libvirt.LibvirtDriver",
            "value": 2600,
        },
        {
            "name": "cpu.percent",
            "timestamp": "2024-05-06T07:08:09.123456",
            "source": "libvirt.LibvirtDriver",
            "value": 0.37,
        },
    ]
    later = T + datetime.timedelta(seconds=60)
    tracker.update_host(reading(later, percent=5))
    got = tracker.compute_node_view("192.0.2.1")["metrics"]
    assert [m["value"] for m in got] == [2600, 0.05]
    assert {m["timestamp"] for m in got} == {"2024-05-06T07:09:09.123456"}


def test_a_reading_that_differs_only_in_metrics_keeps_the_state(tracker):
    first = tracker.update_host(reading(T))
    second = tracker.update_host(reading(T + datetime.timedelta(seconds=60), percent=90))
    # Same snapshot object: nothing rebuilt, nothing written.
    assert second is first
    assert [m.value for m in tracker.host_metrics()] == [2600, 90]


def test_no_metrics_is_an_empty_list(tracker):
    tracker.update_host(HOST)
    assert tracker.compute_node_view("192.0.2.1")["metrics"] == []
    tracker.update_host(reading(T))
    tracker.update_host(HOST)  # turned off, or unavailable now
    assert tracker.compute_node_view("192.0.2.1")["metrics"] == []


def test_an_unreadable_host_has_no_metrics(tracker):
    tracker.update_host(reading(T))
    tracker.mark_host_unavailable(errors.HypervisorUnavailable(uri="qemu:///system", reason="x"))
    assert tracker.host_metrics() == ()
    assert tracker.compute_node_view("192.0.2.1")["metrics"] == []
