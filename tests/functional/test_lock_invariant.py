"""Invariant 1: no network I/O under the tracker lock.

Every Placement request (the client's ``RequestObserver``) and every libvirt
call (the driver's ``CallObserver``, which sees each call of
``virt/libvirt/calls.py``, the connection's open, set-up and close) is
checked on the thread that makes it, while audits and claims run together
against the libvirt test driver and the real Placement app. The check looks
at the lock of *every* node of the agent, not only the primary, and runs
with one node and with two.

The negative controls make the same checker watch calls made while a
tracker lock is held, so that a check which can never fire does not pass
for proof.
"""

import collections
import dataclasses
import threading
import uuid

import pytest

from rtagent.placement.desired import desired_tree
from rtagent.placement.errors import AllocationRefused
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter as make_adapter
from rtagent.tracker.errors import ComputeResourcesUnavailable
from rtagent.tracker.model import Flavor
from rtagent.virt.libvirt.calls import CallObserver
from rtagent.virt.libvirt.driver import LibvirtDriver
from tests.functional.conftest import Recorder

pytestmark = pytest.mark.functional


class LockChecker:
    """Records every Placement request and libvirt call, and those made by
    a thread holding any node's tracker lock.

    ``placement`` goes to the Placement client, ``libvirt`` to the driver;
    ``watch(nodes)`` names the agent's NodeSet once it exists (the observers
    must be built before the agent, which is built from them).
    """

    def __init__(self):
        self._mutex = threading.Lock()
        self._nodes = None
        self.seen = collections.Counter()  # "placement" / "libvirt" -> calls
        self.threads = collections.Counter()  # (kind, thread name) -> calls
        self.unchecked = []  # calls made before the agent existed
        self.under_lock = []  # (kind, what, thread name, node UUIDs held)
        self.placement = _PlacementHook(self)
        self.libvirt = _LibvirtHook(self)

    def watch(self, nodes):
        self._nodes = nodes

    def check(self, kind, what):
        thread = threading.current_thread().name
        with self._mutex:
            self.seen[kind] += 1
            self.threads[kind, thread.split("-")[0]] += 1
        if self._nodes is None:
            self.unchecked.append((kind, what))
            return
        held = [t.node_uuid for t in self._nodes.trackers() if t.lock_held_by_current_thread()]
        if held:
            self.under_lock.append((kind, what, thread, held))

    def flagged(self, kind):
        return [c for c in self.under_lock if c[0] == kind]


class _PlacementHook(Recorder):
    def __init__(self, checker):
        super().__init__()
        self._checker = checker

    def before(self, method, url):
        self._checker.check("placement", f"{method} {url}")


class _LibvirtHook(CallObserver):
    def __init__(self, checker):
        self._checker = checker

    def before(self, what):
        self._checker.check("libvirt", what)


class OneAtATime:
    """A Placement adapter that sends one request at a time, with every
    other ``OneAtATime`` sharing ``lock``.

    The in-process Placement fixture keeps its database on one in-memory
    SQLite connection, which fails a request that starts while another is
    in flight ("cannot start a transaction within a transaction"); the
    claim threads' standalone writes would otherwise race the audit's. The
    checker runs before the request waits here, so no call escapes it, and
    the lock cannot deadlock with a tracker lock unless a request is made
    under one, which the test fails anyway.
    """

    def __init__(self, adapter, lock):
        self._adapter = adapter
        self._lock = lock

    def request(self, url, method, **kwargs):
        with self._lock:
            return self._adapter.request(url, method, **kwargs)

    def get(self, url, **kwargs):
        return self.request(url, "GET", **kwargs)

    def put(self, url, **kwargs):
        return self.request(url, "PUT", **kwargs)


class TwoNodes(LibvirtDriver):
    """The demo host, read once through libvirt per audit and reported as
    two nodes (as a driver managing several would), so that a call made
    under the second node's lock is looked for too."""

    def read_nodes(self):
        view = self.read_host()
        second = dataclasses.replace(view, hypervisor_hostname=view.hypervisor_hostname + "-b")
        return [view, second]


@pytest.fixture
def placement_lock():
    return threading.Lock()


@pytest.fixture
def operator(placement, placement_lock):
    """Another writer on the same Placement, one request at a time."""
    return OneAtATime(make_adapter(placement.endpoint), placement_lock)


@pytest.fixture
def build(placement, make_conf, placement_lock):
    """Build an agent as the service does, on the libvirt test driver (the
    demo host) and the fixture's Placement, observed by a new LockChecker.

    ``driver_class`` None: the configured driver (one node); else that
    LibvirtDriver class, built here with the checker as its observer.
    """
    agents = []

    def make(driver_class=None):
        checker = LockChecker()
        conf = make_conf()
        driver = None
        if driver_class is not None:
            driver = driver_class(
                conf.libvirt.connection_uri,
                conf.libvirt.instances_path,
                events=True,
                observer=checker.libvirt,
            )
        agent = builder.build_agent(
            conf,
            driver=driver,
            adapter=OneAtATime(make_adapter(placement.endpoint), placement_lock),
            observer=checker.placement,
            libvirt_observer=checker.libvirt,
        )
        agents.append(agent)
        checker.watch(agent.nodes)
        return agent, checker

    yield make
    for agent in agents:
        agent.close()


STANDALONE_PER_THREAD = 8


def _audits_and_claims(agent, operator, audits=20):
    """Audit ``audits`` times while four threads claim and abort on every
    node, locally and, for the first few, standalone (the agent writes the
    allocation; healing deletes the aborted ones at a later audit).

    Each thread holds at most one claim (the demo host has room for about
    five more 1-VCPU claims beside its domains), aborting it next, so that
    refusals stay rare and claims keep flowing for the whole run. Healing
    costs Placement requests per released consumer, so the standalone
    claims are few and an aborted local claim (never in Placement) is
    forgotten at once; otherwise healing, not the claims, would fill the
    run.

    :returns: (claims granted, claims refused, unexpected exceptions).
    """
    agent.audit()
    nodes = [t.node_uuid for t in agent.nodes.trackers()]
    stop = threading.Event()
    claimed, refused, failures = [], [], []

    def claims(worker):
        held = collections.deque()
        n = 0
        while not stop.is_set():
            n += 1
            # Every node gets both kinds of claim.
            node = nodes[(n // 2 + worker) % len(nodes)]
            uid = str(uuid.uuid4())
            local = n % 2 == 1 or n > 2 * STANDALONE_PER_THREAD
            try:
                if local:
                    agent.nodes.get(node).instance_claim(uid, Flavor(1, 64, 1))
                else:
                    agent.claim_standalone(
                        uid, Flavor(1, 64, 1), project_id="p", user_id="u", node_uuid=node
                    )
                claimed.append(uid)
                held.append((node, uid, local))
            except (ComputeResourcesUnavailable, AllocationRefused):
                refused.append(uid)
            except Exception as exc:  # anything else is a test failure
                failures.append((worker, exc))
                return
            try:
                if len(held) > 1 or (held and n % 3 == 0):
                    old_node, old, was_local = held.popleft()
                    tracker = agent.nodes.get(old_node)
                    tracker.abort_instance_claim(old)
                    if was_local:
                        tracker.forget_released([old])
            except Exception as exc:
                failures.append((worker, exc))
                return
            # Leave the audit thread its share of the interpreter.
            stop.wait(0.002)

    workers = [threading.Thread(target=claims, args=(i,), name=f"claims-{i}") for i in range(4)]
    for w in workers:
        w.start()
    try:
        for i in range(audits):
            if i % 4 == 0:
                # someone else bumps the generations so audits really write
                for node in nodes:
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
    return claimed, refused, failures


@pytest.mark.parametrize("driver_class", [None, TwoNodes], ids=["one-node", "two-nodes"])
def test_no_placement_request_or_libvirt_call_with_a_lock_held(build, operator, driver_class):
    agent, checker = build(driver_class)
    claimed, _refused, failures = _audits_and_claims(agent, operator)
    assert not failures
    assert claimed, "claims ran alongside the audits"
    assert len(agent.nodes.trackers()) == (2 if driver_class else 1)
    # The checks ran: 21 audits each read libvirt (connect + at least 6
    # reads of a steady host), wrote to Placement, and the claim threads
    # sent their standalone writes.
    assert checker.seen["libvirt"] >= 21 * 7, checker.seen
    audit_writes = [
        url
        for method, url, _ in checker.placement.requests
        if method == "PUT" and url.startswith("/resource_providers/")
    ]
    assert len(audit_writes) >= 5 * len(agent.nodes.trackers()), "audits wrote to Placement"
    assert checker.threads["placement", "claims"] > 0, checker.threads
    assert checker.unchecked == []
    assert checker.under_lock == []


@pytest.mark.parametrize("node_index", [0, 1], ids=["first-node", "second-node"])
def test_the_check_detects_a_libvirt_call_under_any_lock(build, node_index):
    """Negative control: a libvirt reading made inside a node's lock is caught,
    whichever node's lock it is."""
    agent, checker = build(TwoNodes)
    agent.audit()
    assert checker.seen["libvirt"] > 0 and checker.under_lock == []
    tracker = agent.nodes.trackers()[node_index]
    with tracker._locked("test"):
        agent.driver.read_nodes()
    flagged = checker.flagged("libvirt")
    assert flagged, "read_nodes under the lock was not caught"
    assert {c[1] for c in flagged} >= {"reuse connection", "node info", "domain states"}
    assert all(c[3] == [tracker.node_uuid] for c in flagged)
    assert checker.flagged("placement") == []


def test_the_check_detects_a_placement_request_under_the_lock(build):
    """Negative control: the same checker catches a sync made inside the lock."""
    agent, checker = build()
    snapshot = agent.tracker.update_host(agent.driver.read_host())
    with agent.tracker._locked("test"):
        agent.sync.sync(desired_tree(snapshot))
    flagged = checker.flagged("placement")
    assert flagged and flagged[0][1].startswith("GET ")
    assert checker.flagged("libvirt") == []
