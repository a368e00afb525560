"""Sync retries while Placement fails, with a scripted clock."""

import random

from rtagent.placement import errors
from rtagent.placement.backoff import SyncBackoff

DOWN = errors.PlacementUnavailable(method="GET", url="/", reason="x")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_retries_keep_a_random_phase_every_window_and_success_clears_them():
    clock = Clock()
    backoff = SyncBackoff(window=110, clock=clock, wall=lambda: 42.0, rng=lambda: 0.25)
    assert backoff.due() and not backoff.status().in_sync and backoff.pending_retry() is None
    assert backoff.record_failure(DOWN) == 27.5  # the phase: a quarter of the window
    assert not backoff.due() and backoff.pending_retry() == 27.5
    status = backoff.status()
    assert status.failures == 1 and status.retry_in == 27.5
    assert status.last_error.startswith("placement.unavailable: Placement is unavailable")
    # Each later attempt comes one window after the one that was due, even
    # when it ran late (a slow request, an audit that came after it).
    clock.now = 1027.5 + 3
    assert backoff.due()
    assert backoff.record_failure(DOWN) == 107
    assert clock.now + backoff.pending_retry() == 1137.5
    clock.now = 1137.5 + 200  # two windows late: the next point of the comb
    assert backoff.record_failure(DOWN) == 20
    assert clock.now + backoff.pending_retry() == 1357.5
    clock.now = 1357.5
    backoff.record_success()
    assert backoff.pending_retry() is None
    assert backoff.status().to_dict() == {
        "in_sync": True,
        "last_success": 42.0,
        "last_error": None,
        "failures": 0,
        "retry_in": 0.0,
    }


def test_agents_that_met_an_outage_come_back_evenly_spread_over_the_window():
    """The property the schedule exists for: whenever the outage ends, the
    first attempts after it fall evenly over the next window (none later),
    not bunched at its start as exponential backoff bunches them."""
    window, outage_end, agents = 110.0, 600.0, 2000
    rng = random.Random(7)
    back = []
    for _ in range(agents):
        clock = Clock()
        clock.now = rng.uniform(0, 300)  # its due read fails at some point
        backoff = SyncBackoff(window=window, clock=clock, rng=rng.random)
        backoff.record_failure(DOWN)
        while clock.now + backoff.pending_retry() < outage_end:
            clock.now += backoff.pending_retry()
            backoff.record_failure(DOWN)
        back.append(clock.now + backoff.pending_retry() - outage_end)
    assert max(back) <= window
    quarters = [sum(q * window / 4 <= t < (q + 1) * window / 4 for t in back) for q in range(4)]
    assert all(abs(n - agents / 4) < 0.1 * agents / 4 for n in quarters), quarters


def test_window_zero_retries_at_once():
    clock = Clock()
    backoff = SyncBackoff(window=0, clock=clock)
    assert backoff.record_failure(RuntimeError("boom")) == 0
    assert backoff.due()
    assert backoff.status().last_error == "RuntimeError: boom"
    assert backoff.record_failure(RuntimeError("boom")) == 0
    assert backoff.due()
