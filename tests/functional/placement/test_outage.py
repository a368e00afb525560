"""Placement erroring, then back: claims keep working, the sync backs off,
then converges on the first attempt after Placement returns."""

import contextlib
import urllib.parse
import uuid

import pytest
import wsgi_intercept

from rtagent.placement import errors
from rtagent.placement.backoff import SyncBackoff
from rtagent.placement.sync import ProviderSync
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder
from tests.functional.placement.conftest import get

pytestmark = pytest.mark.functional


@contextlib.contextmanager
def placement_failing(placement, methods=None):
    """Every request (of ``methods`` only, if given) answers 503 until the
    block ends; the others reach the real app. (A mock: the real app cannot
    be made to fail on demand; its database and state are kept.)"""
    url = urllib.parse.urlsplit(placement.endpoint)
    key = (url.hostname, url.port or 80)
    real = wsgi_intercept._wsgi_intercept[key]
    app = real[0]()

    def unavailable(environ, start_response):
        if methods is not None and environ["REQUEST_METHOD"] not in methods:
            return app(environ, start_response)
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
        # The first retry half-way through the 60 s window, then every 60 s.
        make_backoff=lambda: SyncBackoff(window=60, clock=clock, wall=clock, rng=lambda: 0.5),
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
        clock.now = 30
        assert tick() == "failed"
        clock.now = 60
        assert tick() == "skipped"
        assert health.status().retry_in == 30

    clock.now = 90
    recorder.reset()
    assert tick() == "synced"
    status = health.status()
    assert status.in_sync and status.failures == 0 and status.last_error is None
    assert (
        "COMPUTE_STATUS_DISABLED" in get(operator, f"/resource_providers/{root}/traits")["traits"]
    )
    # only reads failed, so the cached view was kept: the listing alone,
    # then the trait PUT; + two GETs: its generation moved, so the agent
    # looks for unknown consumers once, reading the claim made meanwhile
    # and the root's usages
    assert recorder.count("GET") == 1 + 2
    recorder.reset()
    assert tick() == "synced"
    assert recorder.count() == 1


ROOT = "9f1a2b3c-0000-4000-8000-0000000000f2"


def tree(vcpus=8):
    return ProviderTree(
        [
            Provider(
                uuid=ROOT,
                name="outage-host",
                traits=frozenset({"COMPUTE_NODE"}),
                managed_traits=frozenset({"COMPUTE_NODE"}),
                inventories=frozen_map({"VCPU": Inventory(total=vcpus, max_unit=vcpus)}),
                managed_classes=frozenset({"VCPU"}),
            )
        ]
    )


def test_a_failed_read_keeps_the_view_so_the_retry_is_one_listing(client, recorder, placement):
    """An agent whose due read meets an outage comes back with one request,
    not a re-read of its whole tree: nothing was written, so what it last
    read is still what Placement holds (or a later conflict re-reads)."""
    clock = Clock()
    sync = ProviderSync(client, rng=lambda: 0.0, refresh_interval=300, clock=clock)
    sync.sync(tree())
    clock.now += 301  # the read is due
    with placement_failing(placement):
        recorder.reset()
        with pytest.raises(errors.PlacementUnavailable):
            sync.sync(tree())
        assert recorder.count("GET") == 1 and recorder.count() == 1
    assert sync.view.get(ROOT) is not None  # kept
    assert sync.refresh_due_in() == 0  # the next sync reads
    recorder.reset()
    result = sync.sync(tree())
    assert result.read and result.operations == ()
    assert [(m, u) for m, u, _ in recorder.requests] == [("GET", "/resource_providers")]


def test_a_write_whose_answer_is_lost_drops_the_view(client, recorder, placement, operator):
    """A write that may have landed: the view is not trusted any more, the
    next sync re-reads the provider before writing."""
    clock = Clock()
    sync = ProviderSync(client, rng=lambda: 0.0, refresh_interval=300, clock=clock)
    sync.sync(tree(vcpus=8))
    with placement_failing(placement, methods={"PUT", "POST", "DELETE"}):
        with pytest.raises(errors.PlacementUnavailable):
            sync.sync(tree(vcpus=16))  # a local change: synced at once
    assert sync.view.get(ROOT) is None  # dropped
    recorder.reset()
    result = sync.sync(tree(vcpus=16))
    assert result.read and len(result.operations) == 1
    urls = [(m, u) for m, u, _ in recorder.requests]
    assert ("GET", f"/resource_providers/{ROOT}/inventories") in urls  # re-read
    assert (
        get(operator, f"/resource_providers/{ROOT}/inventories")["inventories"]["VCPU"]["total"]
        == 16
    )
