"""Invariant 1: no network I/O under the tracker lock, checked at every
request the Placement client sends while audits and claims run together."""

import threading
import uuid

import pytest

from rtagent.placement.desired import desired_tree
from rtagent.tracker.errors import ComputeResourcesUnavailable
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder

pytestmark = pytest.mark.functional


class LockChecker(Recorder):
    """Records, for every request, whether the sending thread held the lock."""

    def __init__(self):
        super().__init__()
        self.tracker = None
        self.under_lock = []

    def before(self, method, url):
        if self.tracker.lock_held_by_current_thread():
            self.under_lock.append((method, url, threading.current_thread().name))


def test_placement_is_never_called_with_the_lock_held(make_agent, operator):
    checker = LockChecker()
    agent = make_agent(observer=checker)
    checker.tracker = agent.tracker
    agent.audit()
    stop = threading.Event()
    claimed, refused, failures = [], [], []

    def claims():
        while not stop.is_set():
            uid = str(uuid.uuid4())
            try:
                agent.tracker.instance_claim(uid, Flavor(1, 64, 1))
                claimed.append(uid)
                if len(claimed) % 2:
                    agent.tracker.abort_instance_claim(uid)
            except ComputeResourcesUnavailable:
                refused.append(uid)
                for old in list(claimed)[:3]:
                    agent.tracker.abort_instance_claim(old)
            except Exception as exc:  # anything else is a test failure
                failures.append(exc)
                return

    workers = [threading.Thread(target=claims, name=f"claims-{i}") for i in range(4)]
    for w in workers:
        w.start()
    node = agent.tracker.node_uuid
    try:
        for i in range(20):
            if i % 4 == 0:
                # someone else bumps the generation so audits really write
                body = operator.get(f"/resource_providers/{node}/traits").json()
                operator.put(
                    f"/resource_providers/{node}/traits",
                    json={
                        "resource_provider_generation": body["resource_provider_generation"],
                        "traits": [],
                    },
                )
            agent.audit()
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    assert not failures
    assert claimed, "claims ran alongside the audits"
    assert checker.count("PUT") >= 5, "audits wrote to Placement"
    assert checker.under_lock == []


def test_the_check_detects_a_call_under_the_lock(make_agent):
    """Negative control: the same checker catches a sync made inside the lock."""
    checker = LockChecker()
    agent = make_agent(observer=checker)
    checker.tracker = agent.tracker
    snapshot = agent.tracker.update_host(agent.driver.read_host())
    with agent.tracker._locked("test"):
        agent.sync.sync(desired_tree(snapshot))
    assert checker.under_lock and checker.under_lock[0][0] == "GET"
