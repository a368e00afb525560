"""The audit loop with a scripted wait: no sleeping, no real clock."""

import threading

from rtagent.service.periodic import PeriodicLoop
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


def test_trigger_runs_early_once_per_burst_with_debounce():
    waits = []

    def task():
        if loop.runs == 0:
            # A burst of events during the first run: one early run after it.
            loop.trigger()
            loop.trigger()

    def wait(event, seconds):
        waits.append(seconds)
        if len(waits) == 2:
            loop.stop()

    loop = PeriodicLoop(task, interval=3600, wait=wait, debounce=0.5)
    loop.run()
    # run, (trigger already set: no interval wait) debounce 0.5, run, interval wait -> stop
    assert waits == [0.5, 3600]
    assert loop.runs == 2
    assert loop.triggered_runs == 1


def test_trigger_wakes_a_waiting_loop():
    runs = threading.Semaphore(0)
    loop = PeriodicLoop(runs.release, interval=3600, debounce=0.01)
    worker = threading.Thread(target=loop.run)
    worker.start()
    try:
        assert runs.acquire(timeout=5)
        loop.trigger()
        assert runs.acquire(timeout=5)  # an hour's interval: only the trigger ran it
        assert loop.triggered_runs == 1
    finally:
        loop.stop()
        worker.join(2)


def test_intervals_are_jittered_within_bounds():
    waits = []
    draws = iter([0.0, 1.0, 0.5])

    def wait(event, seconds):
        waits.append(round(seconds, 6))
        if len(waits) == 3:
            loop.stop()

    loop = PeriodicLoop(lambda: None, interval=60, wait=wait, jitter=0.25, rng=lambda: next(draws))
    loop.run()
    assert waits == [45.0, 75.0, 60.0]  # 60 x [0.75, 1.25, 1.0]


def test_a_retry_due_before_the_interval_wakes_the_loop_for_it():
    """A failed sync's retry (``due_in``) is not held back to the next
    audit; a due time later than the interval, none, zero or a failing
    ``due_in`` leave the interval as it is."""
    answers = iter([25.0, None, 90.0, 0.0, RuntimeError("bug")])
    waits = []

    def due_in():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def wait(event, seconds):
        waits.append(seconds)
        if len(waits) == 5:
            loop.stop()

    loop = PeriodicLoop(lambda: None, interval=60, wait=wait, due_in=due_in)
    loop.run()
    assert waits == [25.0, 60, 60, 60, 60]
