"""Placement erroring, then back: claims keep working, the sync backs off,
then converges on the first attempt after Placement returns."""

import contextlib
import urllib.parse
import uuid

import pytest
import wsgi_intercept

from rtagent.placement import errors
from rtagent.placement.backoff import SyncBackoff
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder
from tests.functional.placement.conftest import get

pytestmark = pytest.mark.functional


@contextlib.contextmanager
def placement_failing(placement):
    """Every request answers 503 until the block ends. (A mock: the real
    app cannot be made to fail on demand; its database and state are kept.)"""
    url = urllib.parse.urlsplit(placement.endpoint)
    key = (url.hostname, url.port or 80)
    real = wsgi_intercept._wsgi_intercept[key]

    def unavailable(environ, start_response):
        start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
        return [b"placement is down for maintenance"]

    wsgi_intercept._wsgi_intercept[key] = (lambda: unavailable, real[1])
    try:
        yield
    finally:
        wsgi_intercept._wsgi_intercept[key] = real


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def test_outage_backoff_then_convergence(make_agent, placement, operator):
    recorder = Recorder()
    clock = Clock()
    agent = make_agent(
        observer=recorder,
        make_backoff=lambda: SyncBackoff(
            base_delay=10, max_delay=60, clock=clock, wall=clock, rng=lambda: 1.0
        ),
    )
    root = agent.tracker.node_uuid

    health = agent.publisher(root).backoff

    def tick():
        """One audit of the agent: synced, failed, or skipped (backing off)."""
        try:
            agent.audit()
        except errors.SyncBackingOff:
            return "skipped"
        except errors.PlacementError:
            return "failed"
        return "synced"

    assert tick() == "synced" and health.status().in_sync

    with placement_failing(placement):
        recorder.reset()
        assert tick() == "failed"
        assert [s for _, _, s in recorder.requests] == [503]  # one probe, no writes
        status = health.status()
        assert not status.in_sync and status.failures == 1
        assert status.last_error.startswith("placement.unavailable")
        # claims keep working locally
        agent.tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 256))
        # the node is disabled meanwhile: Placement must learn it later
        agent.tracker.set_disabled("maintenance")
        clock.now = 5
        assert tick() == "skipped"  # backing off: no request at all
        assert recorder.count() == 1
        clock.now = 10
        assert tick() == "failed"
        clock.now = 20
        assert tick() == "skipped"
        assert health.status().retry_in == 10

    clock.now = 30
    recorder.reset()
    assert tick() == "synced"
    status = health.status()
    assert status.in_sync and status.failures == 0 and status.last_error is None
    assert (
        "COMPUTE_STATUS_DISABLED" in get(operator, f"/resource_providers/{root}/traits")["traits"]
    )
    # the outage dropped the cached view (a write may have landed): one
    # full re-read, then steady state again
    # + two GETs: its generation moved, so the agent looks for unknown
    # consumers once, reading the claim made meanwhile and the root's usages
    assert recorder.count("GET") == 3 + 2
    recorder.reset()
    assert tick() == "synced"
    assert recorder.count() == 1
