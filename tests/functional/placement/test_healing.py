"""Healing released consumers' allocations, against the real Placement app."""

import uuid

import pytest

from rtagent.placement.passes.heal import AllocationHealer
from rtagent.placement.passes.unknown import ConsumerReport, unknown_consumers
from rtagent.tracker.model import Flavor
from tests.functional.placement.conftest import (
    allocations_of,
    get,
    make_provider,
    put_allocation,
)

pytestmark = pytest.mark.functional

SMALL = Flavor(1, 256, 1)
RES = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}


@pytest.fixture
def node(make_agent):
    agent = make_agent()
    agent.audit()
    return agent


def released_instance(agent, operator, elsewhere=None):
    """A claimed instance with its allocation, then deleted: released."""
    inst = str(uuid.uuid4())
    agent.tracker.instance_claim(inst, SMALL)
    allocs = {agent.tracker.node_uuid: RES}
    if elsewhere:
        allocs[elsewhere] = {"DISK_GB": 5}
    put_allocation(operator, inst, allocs)
    agent.tracker.abort_instance_claim(inst)
    assert inst in agent.tracker.snapshot().released
    return inst


def test_released_consumer_is_healed_on_the_second_pass_only_on_our_providers(
    node, operator, client, recorder
):
    root = node.tracker.node_uuid
    other = make_provider(operator, "shared-disk", inventories={"DISK_GB": {"total": 100}})
    inst = released_instance(node, operator, elsewhere=other)
    healer = AllocationHealer(client)

    first = healer.heal(node.tracker.snapshot().released, [root])
    assert first.pending == {inst} and not first.healed
    assert allocations_of(operator, inst) == {root: RES, other: {"DISK_GB": 5}}

    recorder.reset()
    second = healer.heal(node.tracker.snapshot().released, [root])
    assert second.healed == {inst}
    assert second.removed == {inst: {root: RES}}
    # the other provider's part is kept, with the consumer's owner and type
    assert allocations_of(operator, inst) == {other: {"DISK_GB": 5}}
    body = get(operator, f"/allocations/{inst}")
    assert (body["project_id"], body["user_id"], body["consumer_type"]) == (
        "proj",
        "user",
        "INSTANCE",
    )
    assert [m for m, _, _ in recorder.requests] == ["GET", "PUT"]
    assert get(operator, f"/resource_providers/{root}/usages")["usages"]["VCPU"] == 0

    node.tracker.forget_released(second.healed)
    assert node.tracker.snapshot().released == frozenset()
    # nothing released: healing costs nothing
    recorder.reset()
    assert healer.heal(frozenset(), [root]).healed == frozenset()
    assert recorder.requests == []


def test_whole_consumer_is_removed_with_an_empty_put_not_delete(node, operator, client, recorder):
    root = node.tracker.node_uuid
    inst = released_instance(node, operator)
    healer = AllocationHealer(client)
    healer.heal({inst}, [root])
    recorder.reset()
    assert healer.heal({inst}, [root]).healed == {inst}
    assert [m for m, _, _ in recorder.requests] == ["GET", "PUT"]
    assert allocations_of(operator, inst) == {}


def test_a_consumer_placed_back_between_passes_is_not_healed(node, operator, client):
    """The race nova lost: the scheduler writes a new allocation for the
    instance on this node before the claim arrives."""
    root = node.tracker.node_uuid
    inst = released_instance(node, operator)
    healer = AllocationHealer(client)
    assert healer.heal({inst}, [root]).pending == {inst}
    generation = get(operator, f"/allocations/{inst}")["consumer_generation"]
    put_allocation(operator, inst, {root: {"VCPU": 2, "MEMORY_MB": 512}}, generation)
    # still released in the tracker (the claim has not arrived yet)
    result = healer.heal({inst}, [root])
    assert result.pending == {inst} and not result.healed
    assert allocations_of(operator, inst) == {root: {"VCPU": 2, "MEMORY_MB": 512}}
    # then the claim arrives: no longer released, never healed
    node.tracker.instance_claim(inst, Flavor(2, 512))
    assert inst not in node.tracker.snapshot().released
    assert healer.heal(node.tracker.snapshot().released, [root]).healed == frozenset()
    assert allocations_of(operator, inst) == {root: {"VCPU": 2, "MEMORY_MB": 512}}


def test_still_released_is_asked_just_before_the_write(node, operator, client):
    root = node.tracker.node_uuid
    inst = released_instance(node, operator)
    healer = AllocationHealer(client)
    healer.heal({inst}, [root])
    result = healer.heal({inst}, [root], still_released=lambda c: False)
    assert not result.healed
    assert allocations_of(operator, inst) == {root: RES}


def test_a_concurrent_write_makes_our_write_fail_not_theirs(node, operator, client, recorder):
    root = node.tracker.node_uuid
    inst = released_instance(node, operator)
    healer = AllocationHealer(client)
    healer.heal({inst}, [root])

    def interfere(method, url):
        if method == "PUT":
            recorder.hook = None
            gen = get(operator, f"/allocations/{inst}")["consumer_generation"]
            put_allocation(operator, inst, {root: {"VCPU": 3}}, gen)

    recorder.hook = interfere
    result = healer.heal({inst}, [root])
    assert result.conflicts == {inst} and not result.healed
    assert allocations_of(operator, inst) == {root: {"VCPU": 3}}
    assert recorder.requests[-1][2] == 409


def test_unknown_consumers_are_reported_never_touched(node, operator, client, caplog):
    root = node.tracker.node_uuid
    tracked = str(uuid.uuid4())
    node.tracker.instance_claim(tracked, SMALL)
    put_allocation(operator, tracked, {root: RES})
    stranger = str(uuid.uuid4())
    put_allocation(operator, stranger, {root: {"VCPU": 1}})
    snap = node.tracker.snapshot()
    known = {i.uuid for i in snap.instances} | set(snap.released)

    found = unknown_consumers(client, [root], known)
    assert found == {stranger: {root: {"VCPU": 1}}}
    report = ConsumerReport()
    report.update(found)
    report.update(found)
    assert [r.getMessage() for r in caplog.records].count(
        caplog.records[-1].getMessage()
    ) == 1 and stranger in caplog.records[-1].getMessage()
    # healing released consumers never touches it
    healer = AllocationHealer(client)
    for _ in range(2):
        healer.heal(snap.released, [root])
    assert allocations_of(operator, stranger) == {root: {"VCPU": 1}}


def test_an_instance_released_as_deleted_is_healed_at_the_first_look(node, operator, client):
    """nova's database says deleted: never placed again, so nothing to wait
    for (issue 31: nova's tracker healed a server deleted while its compute
    was down at the first periodic after the restart)."""
    root = node.tracker.node_uuid
    inst = str(uuid.uuid4())
    node.tracker.instance_claim(inst, SMALL)
    put_allocation(operator, inst, {root: RES})
    node.tracker.update_instance(inst, vm_state="deleted")
    snapshot = node.tracker.snapshot()
    assert snapshot.deleted == {inst} and inst in snapshot.healable
    result = AllocationHealer(client).heal(snapshot.healable, [root], at_once=snapshot.deleted)
    assert result.healed == {inst}
    assert allocations_of(operator, inst) == {}
    node.tracker.forget_released(result.healed)
    assert node.tracker.snapshot().deleted == frozenset()


def test_the_first_sync_after_a_delete_heals_it_and_an_abort_waits(node, operator):
    """Through the agent's own passes: a delete is healed by the next sync;
    an abort (a build that may be placed back here) by the audit after it,
    not by a second prompt sync."""
    root = node.tracker.node_uuid
    deleted, aborted = str(uuid.uuid4()), str(uuid.uuid4())
    for inst in (deleted, aborted):
        node.tracker.instance_claim(inst, SMALL)
        put_allocation(operator, inst, {root: RES})
    node.tracker.update_instance(deleted, vm_state="deleted")
    node.tracker.abort_instance_claim(aborted)
    node.sync_changed({root})
    assert allocations_of(operator, deleted) == {}
    assert allocations_of(operator, aborted) == {root: RES}
    node.sync_changed({root})
    assert allocations_of(operator, aborted) == {root: RES}
    node.audit()
    assert allocations_of(operator, aborted) == {}


def test_a_deleted_instance_claimed_again_is_not_healed(node, operator):
    root = node.tracker.node_uuid
    inst = str(uuid.uuid4())
    node.tracker.instance_claim(inst, SMALL)
    node.tracker.update_instance(inst, vm_state="deleted")
    node.tracker.instance_claim(inst, SMALL)
    put_allocation(operator, inst, {root: RES})
    assert node.tracker.snapshot().deleted == frozenset()
    node.sync_changed({root})
    assert allocations_of(operator, inst) == {root: RES}
