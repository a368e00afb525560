"""Nova's VCPU-to-PCPU upgrade in a real Placement: pinned guests that
nova's legacy ``vcpu_pin_set`` left allocating VCPU are moved to PCPU once
the agent (pinning on ``cpu_dedicated_set``) holds their claims, when the
PCPU inventory was in Placement before their claims (a host moved to the
agent from nova). The reshape at the moment the inventory appears is
``test_pinning_fallback.py``'s.

The host is the 2-socket one of ``tests/functional/numa_host.py`` (24
dedicated CPUs, 8 shared), read by the real libvirt driver and published
by an agent built as the service builds it.
"""

import uuid

import pytest

from rtagent.placement.backoff import SyncBackoff
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter as make_adapter
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder, put_allocation
from tests.functional.numa_host import DEDICATED, SHARED, two_socket_driver
from tests.functional.placement.conftest import allocations_of, get

pytestmark = pytest.mark.functional

PINNED = {"hw:cpu_policy": "dedicated"}
LEGACY, LEGACY2, SHARED_GUEST, ODD = (str(uuid.UUID(int=n)) for n in range(1, 5))


@pytest.fixture
def make_numa_agent(placement, make_conf, tmp_path):
    """Agents on the 2-socket host over one state directory (a second one
    is the first restarted)."""
    conf = make_conf(
        rtagent__reserve_untracked_usage=False,
        compute__cpu_dedicated_set=DEDICATED,
        compute__cpu_shared_set=SHARED,
    )
    (tmp_path / "numa-instances").mkdir()
    agents = []

    def make(observer=None):
        driver = two_socket_driver(str(tmp_path / "numa-instances"))
        agent = builder.build_agent(
            conf,
            driver=driver,
            adapter=make_adapter(placement.endpoint),
            observer=observer,
            make_backoff=lambda: SyncBackoff(window=0),
        )
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


@pytest.fixture
def numa_agent(make_numa_agent):
    return make_numa_agent()


def allocate(operator, consumer, node, resources):
    put_allocation(operator, consumer, {node: resources})


def on_node(operator, consumer, node):
    return allocations_of(operator, consumer).get(node)


def test_legacy_pinned_guests_move_from_vcpu_to_pcpu(numa_agent, operator):
    node = numa_agent.audit().snapshot.node_uuid
    invs = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    assert (invs["PCPU"]["total"], invs["VCPU"]["total"]) == (24, 8)

    # Two guests nova pinned under vcpu_pin_set (allocated as VCPU) and one
    # shared guest, all already running when the host moved to the agent.
    legacy, legacy2, shared = LEGACY, LEGACY2, SHARED_GUEST
    allocate(operator, legacy, node, {"VCPU": 4, "MEMORY_MB": 1024})
    allocate(operator, legacy2, node, {"VCPU": 2, "MEMORY_MB": 512})
    allocate(operator, shared, node, {"VCPU": 2, "MEMORY_MB": 512})
    tracker = numa_agent.tracker
    # Claimed as the upgrade guide says: with their flavor, without user_id
    # (their allocations exist).
    tracker.instance_claim(legacy, Flavor(4, 1024), extra_specs=PINNED)
    tracker.instance_claim(legacy2, Flavor(2, 512), extra_specs=PINNED)
    tracker.instance_claim(shared, Flavor(2, 512))
    numa_agent.audit()

    assert on_node(operator, legacy, node) == {"PCPU": 4, "MEMORY_MB": 1024}
    assert on_node(operator, legacy2, node) == {"PCPU": 2, "MEMORY_MB": 512}
    assert on_node(operator, shared, node) == {"VCPU": 2, "MEMORY_MB": 512}
    usages = get(operator, f"/resource_providers/{node}/usages")["usages"]
    assert (usages["PCPU"], usages["VCPU"]) == (6, 2)
    # The owner and project stay the scheduler's.
    body = get(operator, f"/allocations/{legacy}")
    assert (body["project_id"], body["user_id"]) == ("proj", "user")


def test_each_pinned_guest_is_looked_at_once(make_numa_agent, operator):
    recorder = Recorder()
    agent = make_numa_agent(observer=recorder)
    node = agent.audit().snapshot.node_uuid
    allocate(operator, LEGACY, node, {"VCPU": 2, "MEMORY_MB": 512})
    agent.tracker.instance_claim(LEGACY, Flavor(2, 512), extra_specs=PINNED)
    recorder.reset()
    agent.audit()
    assert on_node(operator, LEGACY, node) == {"PCPU": 2, "MEMORY_MB": 512}
    # The unknown-consumer index reads the new claim's consumer; the check
    # reads it once and bases its write on that read: one reshape, on the
    # root's inventories as read just before it.
    mine = [(m, status) for m, url, status in recorder.requests if LEGACY in url]
    assert mine == [("GET", 200), ("GET", 200)]
    writes = [(m, url) for m, url, _ in recorder.requests if m in ("PUT", "POST")]
    assert writes == [("POST", "/reshaper")]
    recorder.reset()
    agent.audit()
    agent.audit()
    assert [r for r in recorder.requests if LEGACY in r[1]] == []


def test_an_allocation_that_is_not_the_legacy_pattern_is_left_alone(numa_agent, operator):
    node = numa_agent.audit().snapshot.node_uuid
    # 3 VCPU for a 2-vCPU pinned claim: not what nova's legacy pinning
    # writes; the agent cannot tell what it is, so it does not rewrite it.
    allocate(operator, ODD, node, {"VCPU": 3, "MEMORY_MB": 512})
    numa_agent.tracker.instance_claim(ODD, Flavor(2, 512), extra_specs=PINNED)
    numa_agent.audit()
    assert on_node(operator, ODD, node) == {"VCPU": 3, "MEMORY_MB": 512}


def test_after_a_restart_one_read_finds_them_all(make_numa_agent, operator):
    # Ten guests claimed while the first agent never published (it stopped
    # first): after the restart, one read of the root's allocations finds
    # them rather than ten reads of one consumer each.
    agent = make_numa_agent()
    node = agent.audit().snapshot.node_uuid
    guests = [str(uuid.UUID(int=100 + n)) for n in range(10)]
    for guest in guests:
        allocate(operator, guest, node, {"VCPU": 2, "MEMORY_MB": 256})
        agent.tracker.instance_claim(guest, Flavor(2, 256), extra_specs=PINNED)
    agent.close()

    recorder = Recorder()
    agent = make_numa_agent(observer=recorder)
    agent.audit()
    for guest in guests:
        assert on_node(operator, guest, node) == {"PCPU": 2, "MEMORY_MB": 256}
    bulk = [
        r for r in recorder.requests if r[1].endswith(f"/resource_providers/{node}/allocations")
    ]
    one_by_one = [r for r in recorder.requests if r[0] == "GET" and "/allocations/" in r[1]]
    # The unknown-consumer index's first full read, and the check's one.
    assert len(bulk) == 2
    # Only the reads each write is based on, not one more per guest to find it.
    assert len(one_by_one) == 10
    # All ten moved in one reshape: none or all, whatever happens half-way.
    reshapes = [r for r in recorder.requests if r[1] == "/reshaper"]
    assert len(reshapes) == 1
