"""The unknown-consumer check after a generation moves reads what changed,
not every allocation of the provider (issue 12 item 6), and still finds
what the full read found: against the real Placement app."""

import uuid

import pytest
from keystoneauth1 import exceptions as ks_exc

from rtagent.placement.errors import PlacementUnavailable
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder
from tests.functional.placement.conftest import allocations_of, put_allocation
from tests.functional.placement.test_node_invariants import RES, TINY

pytestmark = pytest.mark.functional


def gets(recorder):
    return [u for m, u, _ in recorder.requests if m == "GET"]


def full_reads(recorder, node):
    return [u for u in gets(recorder) if u == f"/resource_providers/{node}/allocations"]


@pytest.fixture
def steady(make_agent):
    """An agent past its first checks, and its request recorder."""
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    agent.audit()
    agent.audit()
    recorder.reset()
    return agent, recorder


def claim_as_nova(agent, operator, consumer):
    """The scheduler writes the allocation, then the claim arrives."""
    put_allocation(operator, consumer, {agent.tracker.node_uuid: RES})
    agent.tracker.instance_claim(consumer, TINY)


def test_the_tick_after_a_claim_reads_the_claim_not_every_allocation(steady, operator):
    agent, recorder = steady
    node = agent.tracker.node_uuid
    others = [str(uuid.uuid4()) for _ in range(3)]
    for consumer in others:
        claim_as_nova(agent, operator, consumer)
    agent.audit()  # the index learns them
    recorder.reset()

    new = str(uuid.uuid4())
    claim_as_nova(agent, operator, new)
    agent.audit()
    assert full_reads(recorder, node) == []
    assert f"/allocations/{new}" in gets(recorder)
    assert f"/resource_providers/{node}/usages" in gets(recorder)
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []
    recorder.reset()
    agent.audit()
    assert recorder.count() == 1  # steady again


def test_an_unknown_consumer_written_beside_a_claim_is_still_reported(steady, operator):
    agent, recorder = steady
    node = agent.tracker.node_uuid
    squatter = str(uuid.uuid4())
    put_allocation(operator, squatter, {node: RES})
    claim_as_nova(agent, operator, str(uuid.uuid4()))
    agent.audit()  # the totals differ from the claims': read in full
    assert full_reads(recorder, node) != []
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == [squatter]
    assert allocations_of(operator, squatter) == {node: RES}  # never touched


def test_a_deleted_instance_is_healed_without_reading_every_allocation(steady, operator):
    agent, recorder = steady
    node = agent.tracker.node_uuid
    gone = str(uuid.uuid4())
    claim_as_nova(agent, operator, gone)
    agent.audit()
    agent.tracker.update_instance(gone, vm_state="deleted")
    recorder.reset()
    for _ in range(4):
        agent.audit()
    assert allocations_of(operator, gone) == {}
    assert agent.tracker.snapshot().released == frozenset()
    assert full_reads(recorder, node) == []
    assert agent.sync_status()[node]["unknown_consumers"] == []


def test_an_allocation_removed_behind_the_agents_back_is_noticed(steady, operator):
    """A claimed instance's allocation deleted by someone else, and a new
    unknown consumer of another size: the totals differ, so the provider is
    read in full and the newcomer reported."""
    agent, recorder = steady
    node = agent.tracker.node_uuid
    known = str(uuid.uuid4())
    claim_as_nova(agent, operator, known)
    agent.audit()
    operator.delete(f"/allocations/{known}")
    squatter = str(uuid.uuid4())
    put_allocation(operator, squatter, {node: {"VCPU": 2, "MEMORY_MB": 256}})
    recorder.reset()
    agent.audit()
    agent.audit()
    assert full_reads(recorder, node) != []
    assert agent.sync_status()[node]["unknown_consumers"] == [squatter]


def test_an_operator_report_reads_every_allocation(steady, operator):
    agent, recorder = steady
    node = agent.tracker.node_uuid
    squatter = str(uuid.uuid4())
    put_allocation(operator, squatter, {node: RES})
    assert squatter in agent.report_unknown_consumers()
    assert full_reads(recorder, node) != []


def resize_as_nova(agent, operator, instance, migration, new):
    """A same-node resize: the old flavor moves to the migration consumer,
    the instance gets the new one, then the move is recorded."""
    node = agent.tracker.node_uuid
    generation = operator.get(f"/allocations/{instance}").json()["consumer_generation"]
    owner = {"project_id": "proj", "user_id": "user", "consumer_type": "INSTANCE"}
    resp = operator.post(
        "/allocations",
        json={
            migration: {
                "allocations": {node: {"resources": RES}},
                "consumer_generation": None,
                **dict(owner, consumer_type="MIGRATION"),
            },
            instance: {
                "allocations": {node: {"resources": new}},
                "consumer_generation": generation,
                **owner,
            },
        },
    )
    assert resp.status_code == 204, resp.text
    agent.tracker.start_move(
        migration,
        instance,
        "resize",
        source_node=node,
        dest_node=node,
        old_flavor=TINY,
        new_flavor=Flavor(new["VCPU"], new["MEMORY_MB"]),
    )


@pytest.mark.parametrize("owner_removes_it", [True, False])
def test_a_confirmed_resize_is_followed_consumer_by_consumer(steady, operator, owner_removes_it):
    """The move's two consumers are read one by one; once confirmed, the
    migration consumer is unknown to the node: gone if its owner removed
    its allocation, reported (never touched) if not."""
    agent, recorder = steady
    node = agent.tracker.node_uuid
    instance, migration = str(uuid.uuid4()), str(uuid.uuid4())
    claim_as_nova(agent, operator, instance)
    agent.audit()
    recorder.reset()
    resize_as_nova(agent, operator, instance, migration, {"VCPU": 2, "MEMORY_MB": 512})
    agent.audit()
    assert full_reads(recorder, node) == []
    assert {f"/allocations/{instance}", f"/allocations/{migration}"} <= set(gets(recorder))

    agent.tracker.finish_move(migration)
    agent.tracker.confirm_move(migration)
    if owner_removes_it:
        assert operator.delete(f"/allocations/{migration}").status_code == 204
    else:
        # the instance's allocation rewritten moves the generation, so the
        # node looks again
        generation = operator.get(f"/allocations/{instance}").json()["consumer_generation"]
        put_allocation(operator, instance, {node: {"VCPU": 2, "MEMORY_MB": 512}}, generation)
    recorder.reset()
    agent.audit()
    agent.audit()
    reported = agent.sync_status()[node]["unknown_consumers"]
    if owner_removes_it:
        assert full_reads(recorder, node) == []
        assert reported == []
    else:
        assert reported == [migration]
        assert allocations_of(operator, migration) == {node: RES}


def resized_and_audited(agent, operator):
    """A claim, then a same-node resize as nova makes them, each followed
    by an audit. :returns: (instance, migration)."""
    instance, migration = str(uuid.uuid4()), str(uuid.uuid4())
    claim_as_nova(agent, operator, instance)
    agent.audit()
    resize_as_nova(agent, operator, instance, migration, {"VCPU": 2, "MEMORY_MB": 512})
    agent.audit()
    return instance, migration


def test_a_finished_moves_consumer_left_behind_is_reported_with_nothing_else_moving(
    steady, operator
):
    """The owner's delete of a finished move's migration consumer never
    came (Placement was down when nova made it) and nothing else writes an
    allocation on the node: no generation moves, yet the node stopped
    knowing the consumer, so it reads it alone and reports it after two
    audits (make test-cloud-faults' placement_down_60s: before, the check
    waited for a generation change that never came, and the leak was never
    reported)."""
    agent, recorder = steady
    node = agent.tracker.node_uuid
    _, migration = resized_and_audited(agent, operator)
    generation = operator.get(f"/resource_providers/{node}").json()["generation"]
    agent.tracker.finish_move(migration)
    agent.tracker.confirm_move(migration)
    recorder.reset()
    agent.audit()
    agent.audit()
    assert operator.get(f"/resource_providers/{node}").json()["generation"] == generation
    assert agent.sync_status()[node]["unknown_consumers"] == [migration]
    # Found by reading it alone (the provider is read in full only once
    # there is an unknown consumer to report on).
    assert f"/allocations/{migration}" in set(gets(recorder))


def test_a_forgotten_consumer_is_looked_at_again_after_a_failed_check(steady, operator):
    """Placement went away just as the node stopped knowing the consumer
    (nova's delete of it failed for the same outage): the check that was
    to read it failed, and the next one reads it (make test-cloud-faults'
    placement_down_60s leaked it once when the node took it as read)."""
    agent, recorder = steady
    node = agent.tracker.node_uuid
    _, migration = resized_and_audited(agent, operator)
    agent.tracker.finish_move(migration)
    agent.tracker.confirm_move(migration)

    def down(method, url):
        if url == f"/allocations/{migration}":
            raise ks_exc.ConnectFailure("injected: Placement is down")

    recorder.hook = down
    with pytest.raises(PlacementUnavailable):
        agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []
    recorder.hook = None
    agent.audit()
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == [migration]


def test_a_swap_the_sums_cannot_see_is_found_once_healing_empties_the_instance(steady, operator):
    """nova's conductor moves an instance's allocation to a move's migration
    consumer in one write, the same amounts: the provider's usages still
    equal the index's sums, so the index does not read the provider and
    never sees the migration consumer. Recorded only once over (Placement
    was down meanwhile), the move taught it nothing. Healing then finds the
    released instance holds nothing here: the index was wrong about this
    provider, checks its sums again and finds the migration consumer (make
    test-cloud-faults' placement_down_60s leaked it unreported)."""
    agent, _ = steady
    node = agent.tracker.node_uuid
    instance, migration = str(uuid.uuid4()), str(uuid.uuid4())
    claim_as_nova(agent, operator, instance)
    agent.audit()
    generation = operator.get(f"/allocations/{instance}").json()["consumer_generation"]
    owner = {"project_id": "proj", "user_id": "user"}
    resp = operator.post(
        "/allocations",
        json={
            migration: {
                "allocations": {node: {"resources": RES}},
                "consumer_generation": None,
                "consumer_type": "MIGRATION",
                **owner,
            },
            instance: {
                "allocations": {},
                "consumer_generation": generation,
                "consumer_type": "INSTANCE",
                **owner,
            },
        },
    )
    assert resp.status_code == 204, resp.text
    agent.audit()
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []  # the blind spot
    agent.tracker.abort_instance_claim(instance)  # the instance left
    for _ in range(3):
        agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == [migration]
