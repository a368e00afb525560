"""Fixtures over real parts: Placement's own in-process fixture and the
libvirt test driver with the demo host in etc/."""

import os
import warnings

import pytest

from rtagent import conf as rtconf
from rtagent.placement.backoff import SyncBackoff
from rtagent.placement.client import RequestObserver
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter as make_adapter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_HOST_XML = os.path.join(ROOT, "etc", "rtagent", "demo-host.xml")
DEMO_URI = "test:///" + DEMO_HOST_XML


def put_allocation(adapter, consumer, allocations, generation=None, consumer_type="INSTANCE"):
    """Write ``{provider: {class: amount}}`` for ``consumer`` as a scheduler would."""
    resp = adapter.put(
        f"/allocations/{consumer}",
        json={
            "allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": "proj",
            "user_id": "user",
            "consumer_generation": generation,
            "consumer_type": consumer_type,
        },
    )
    assert resp.status_code == 204, resp.text


@pytest.fixture
def placement():
    """Placement's own functional fixture: the real app over a fresh
    in-memory database, reached through wsgi-intercept."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from placement.tests.functional.fixtures.placement import PlacementFixture

    fx = PlacementFixture(token="admin")
    fx.setUp()
    try:
        yield fx
    finally:
        fx.cleanUp()


@pytest.fixture
def operator(placement):
    """Another writer (an operator, another service) on the same Placement."""
    return make_adapter(placement.endpoint)


class Recorder(RequestObserver):
    """Counts requests and runs an optional hook just before each one."""

    def __init__(self):
        self.requests = []
        self.hook = None

    def before(self, method, url):
        if self.hook is not None:
            self.hook(method, url)

    def after(self, method, url, status, seconds):
        self.requests.append((method, url, status))

    def reset(self):
        self.requests = []

    def count(self, method=None):
        return sum(1 for m, _, _ in self.requests if method in (None, m))


@pytest.fixture
def make_conf(tmp_path):
    def make(**overrides):
        conf = rtconf.new_conf()
        conf([], project="rtagent", default_config_files=[])
        conf.set_override("state_path", str(tmp_path / "state"))
        conf.set_override("connection_uri", DEMO_URI, group="libvirt")
        (tmp_path / "instances").mkdir(exist_ok=True)
        conf.set_override("instances_path", str(tmp_path / "instances"), group="libvirt")
        # These tests look at Placement after each audit; the refresh
        # interval (tests/functional/placement/test_refresh_interval.py and
        # benchmarks/placement_cost.py) is set where it is under test.
        overrides.setdefault("rtagent__placement_refresh_interval", 0)
        for name, value in overrides.items():
            group, _, opt = name.rpartition("__")
            conf.set_override(opt, value, group=group or None)
        return conf

    return make


@pytest.fixture
def make_agent(placement, make_conf):
    """Build agents the way the service does, against the fixture.

    Their sync retries on the very next audit after a failure (no backoff),
    unless a test about backoff passes its own ``make_backoff``.
    """
    agents = []

    def make(conf=None, observer=None, make_backoff=None):
        agent = builder.build_agent(
            conf or make_conf(),
            adapter=make_adapter(placement.endpoint),
            observer=observer,
            make_backoff=make_backoff or (lambda: SyncBackoff(window=0)),
        )
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()
