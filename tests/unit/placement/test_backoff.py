"""Sync backoff while Placement fails with a scripted clock."""

from rtagent.placement import errors
from rtagent.placement.backoff import SyncBackoff


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_backoff_grows_with_failures_up_to_the_cap_and_success_clears_it():
    clock = Clock()
    backoff = SyncBackoff(
        base_delay=10, max_delay=60, clock=clock, wall=lambda: 42.0, rng=lambda: 1.0
    )
    assert backoff.due() and not backoff.status().in_sync
    pauses = []
    for _ in range(5):
        pauses.append(
            backoff.record_failure(errors.PlacementUnavailable(method="GET", url="/", reason="x"))
        )
    assert pauses == [10, 20, 40, 60, 60]
    assert not backoff.due()
    status = backoff.status()
    assert status.failures == 5 and status.retry_in == 60
    assert status.last_error.startswith("placement.unavailable: Placement is unavailable")
    clock.now += 60
    assert backoff.due()
    backoff.record_success()
    assert backoff.status().to_dict() == {
        "in_sync": True,
        "last_success": 42.0,
        "last_error": None,
        "failures": 0,
        "retry_in": 0.0,
    }


def test_jitter_spreads_the_pause():
    clock = Clock()
    backoff = SyncBackoff(base_delay=10, clock=clock, rng=lambda: 0.25)
    assert backoff.record_failure(RuntimeError("boom")) == 2.5
    assert backoff.status().last_error == "RuntimeError: boom"
