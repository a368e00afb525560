"""The audit loop with a scripted wait: no sleeping, no real clock."""

import threading

from rtagent.periodic import PeriodicLoop
from rtagent.virt.errors import HypervisorUnavailable


def test_runs_at_start_then_every_interval_and_survives_errors():
    outcomes = iter(
        [None, HypervisorUnavailable(uri="x", reason="down"), RuntimeError("bug"), None]
    )
    waits = []

    def task():
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome

    def wait(event, seconds):
        waits.append(seconds)
        if len(waits) == 4:
            loop.stop()

    loop = PeriodicLoop(task, interval=60, wait=wait)
    loop.run()
    assert loop.runs == 4
    assert loop.failures == 2
    assert waits == [60, 60, 60, 60]
    assert loop.last_error is None  # the last run succeeded


def test_stop_wakes_a_waiting_loop_at_once():
    started = threading.Event()

    def task():
        started.set()

    loop = PeriodicLoop(task, interval=3600)
    worker = threading.Thread(target=loop.run)
    worker.start()
    assert started.wait(5)
    loop.stop()
    worker.join(2)  # the interval is an hour: only an instant stop ends in time
    assert not worker.is_alive()
    assert loop.runs == 1
