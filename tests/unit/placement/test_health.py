"""Sync health and outage backoff with a scripted clock."""

from rtagent.placement import errors
from rtagent.placement.health import SyncHealth


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_backoff_grows_with_failures_up_to_the_cap_and_success_clears_it():
    clock = Clock()
    health = SyncHealth(
        base_delay=10, max_delay=60, clock=clock, wall=lambda: 42.0, rng=lambda: 1.0
    )
    assert health.due() and not health.status().in_sync
    pauses = []
    for _ in range(5):
        pauses.append(
            health.record_failure(errors.PlacementUnavailable(method="GET", url="/", reason="x"))
        )
    assert pauses == [10, 20, 40, 60, 60]
    assert not health.due()
    status = health.status()
    assert status.failures == 5 and status.retry_in == 60
    assert status.last_error.startswith("placement.unavailable: Placement is unavailable")
    clock.now += 60
    assert health.due()
    health.record_success()
    assert health.status().to_dict() == {
        "in_sync": True,
        "last_success": 42.0,
        "last_error": None,
        "failures": 0,
        "retry_in": 0.0,
    }


def test_jitter_spreads_the_pause():
    clock = Clock()
    health = SyncHealth(base_delay=10, clock=clock, rng=lambda: 0.25)
    assert health.record_failure(RuntimeError("boom")) == 2.5
    assert health.status().last_error == "RuntimeError: boom"
