"""docs/placement-sync.md, "Unknown consumers", against the real Placement
app: a consumer is reported only after two periodic audits a refresh
interval apart found it; prompt syncs never confirm one (issue 48: two
prompt syncs 0.4 s apart during concurrent evacuations reported a
scheduler's allocation whose claim came a moment later)."""

import logging
import time
import uuid

import pytest

from rtagent.tracker.model import Flavor
from tests.functional.placement.conftest import allocations_of, put_allocation

pytestmark = pytest.mark.functional

TINY = Flavor(1, 256)
RES = {"VCPU": 1, "MEMORY_MB": 256}
WARNED = "unknown to this agent"


def another_claim(agent):
    """A claim of another instance: a local change, so the next sync reads
    Placement whatever the refresh interval (as each evacuation's claim
    made the prompt sync read it)."""
    agent.tracker.instance_claim(str(uuid.uuid4()), TINY)


def warnings_about(caplog, consumer):
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and WARNED in r.getMessage() and consumer in r.getMessage()
    ]


@pytest.mark.parametrize("refresh_interval", [0, 300])
def test_prompt_syncs_never_report_a_claim_about_to_arrive(
    make_agent, make_conf, operator, caplog, refresh_interval
):
    agent = make_agent(make_conf(rtagent__placement_refresh_interval=refresh_interval))
    node = agent.audit().snapshot.node_uuid
    caplog.set_level(logging.INFO)
    # The scheduler allocates; its claim is still on the way.
    arriving = str(uuid.uuid4())
    put_allocation(operator, arriving, {node: RES})
    another_claim(agent)
    agent.sync_changed()  # a prompt sync for another claim: found, a candidate
    time.sleep(0.4)
    another_claim(agent)
    agent.sync_changed()  # the next prompt sync finds it again
    assert agent.sync_status()[node]["unknown_consumers"] == []
    agent.tracker.instance_claim(arriving, TINY)  # the claim arrives
    agent.sync_changed()
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []
    assert warnings_about(caplog, arriving) == []


def test_a_prompt_syncs_sighting_and_one_audit_report_nothing(
    make_agent, make_conf, operator, caplog
):
    """Two audits must find it: a prompt sync's sighting starts nothing
    (nova-compute's embedded agent, refresh interval 0: the source of a
    resize sees the move's migration consumer at a prompt sync, and its
    periodic's audit runs before the reconciliation that records the move
    out; CI's tests/nova run reported it so)."""
    agent = make_agent(make_conf(rtagent__placement_refresh_interval=0))
    node = agent.audit().snapshot.node_uuid
    caplog.set_level(logging.INFO)
    leaving = str(uuid.uuid4())
    put_allocation(operator, leaving, {node: RES})
    another_claim(agent)
    agent.sync_changed()  # a prompt sync finds it
    agent.audit()  # the first audit to find it: a candidate only
    assert agent.sync_status()[node]["unknown_consumers"] == []
    assert warnings_about(caplog, leaving) == []
    agent.audit()  # the second: reported
    assert agent.sync_status()[node]["unknown_consumers"] == [leaving]


def test_two_audits_less_than_a_refresh_interval_apart_report_nothing(
    make_agent, make_conf, operator, caplog
):
    agent = make_agent(make_conf(rtagent__placement_refresh_interval=300))
    node = agent.audit().snapshot.node_uuid
    caplog.set_level(logging.INFO)
    leak = str(uuid.uuid4())
    put_allocation(operator, leak, {node: RES})
    another_claim(agent)
    agent.audit()
    time.sleep(0.4)
    another_claim(agent)
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []
    assert warnings_about(caplog, leak) == []


def test_a_leak_is_reported_by_the_audit_a_refresh_interval_later(
    make_agent, make_conf, operator, caplog
):
    agent = make_agent(make_conf(rtagent__placement_refresh_interval=1))
    node = agent.audit().snapshot.node_uuid
    caplog.set_level(logging.INFO)
    leak = str(uuid.uuid4())
    put_allocation(operator, leak, {node: RES})
    # Placement is read once a refresh interval (nothing changed here):
    # the audit after it finds the leak first.
    time.sleep(1.05)
    agent.audit()
    agent.sync_changed()  # a prompt sync in between confirms nothing
    assert agent.sync_status()[node]["unknown_consumers"] == []
    time.sleep(1.05)
    agent.sync_changed()  # due, but a prompt sync: still nothing
    assert agent.sync_status()[node]["unknown_consumers"] == []
    agent.audit()  # an audit a refresh interval later: reported
    assert agent.sync_status()[node]["unknown_consumers"] == [leak]
    assert len(warnings_about(caplog, leak)) == 1


def test_prompt_syncs_never_heal_a_released_consumer(make_agent, make_conf, operator):
    # A released consumer's allocation is healed at an audit only: two
    # prompt syncs 0.2 s apart once healed an instance nova was moving
    # back to its source (a reverted resize), and nova's move then failed
    # on the consumer's generation (test_cloud's resize revert, in CI).
    agent = make_agent(make_conf(rtagent__placement_refresh_interval=0))
    node = agent.audit().snapshot.node_uuid
    leaving = str(uuid.uuid4())
    put_allocation(operator, leaving, {node: RES})
    agent.tracker.instance_claim(leaving, TINY)
    agent.tracker.abort_instance_claim(leaving)  # released, not deleted
    for _ in range(2):
        another_claim(agent)
        agent.sync_changed()
        time.sleep(0.2)
    assert allocations_of(operator, leaving) == {node: RES}
    agent.audit()
    assert allocations_of(operator, leaving) == {}


def test_a_reported_consumer_whose_allocation_someone_removed_is_dropped_at_the_next_audit(
    make_agent, make_conf, operator, caplog
):
    """A removal does not move the provider's generation (Placement bumps
    those a write allocates on): nova's move_allocations back to the
    instance at a move cut short left the destination's agent reporting
    the instance's removed allocation for good (make test-cloud-faults'
    compute_kill_live_migration, issue 50)."""
    agent = make_agent(make_conf(rtagent__placement_refresh_interval=0))
    node = agent.audit().snapshot.node_uuid
    caplog.set_level(logging.INFO)
    leak = str(uuid.uuid4())
    put_allocation(operator, leak, {node: RES})
    another_claim(agent)
    agent.audit()
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == [leak]
    generation = operator.get(f"/resource_providers/{node}").json()["generation"]
    resp = operator.delete(f"/allocations/{leak}")
    assert resp.status_code == 204, resp.text
    assert operator.get(f"/resource_providers/{node}").json()["generation"] == generation
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []
