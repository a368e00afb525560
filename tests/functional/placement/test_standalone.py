"""Standalone mode: the agent writes claims' allocations itself, and rolls
the local claim back when Placement refuses."""

import uuid

import pytest

from rtagent.placement import errors
from rtagent.placement.client import PlacementClient
from rtagent.placement.passes.heal import AllocationHealer
from rtagent.placement.standalone import PRESENT, WRITTEN, claim_standalone, write_allocations
from rtagent.tracker.model import Flavor
from tests.functional.conftest import make_adapter
from tests.functional.placement.conftest import allocations_of, get, put_allocation

pytestmark = pytest.mark.functional


@pytest.fixture
def node(make_agent):
    agent = make_agent()
    agent.audit()
    return agent


def test_a_standalone_claim_writes_its_allocation_in_one_request(node, operator, client, recorder):
    inst = str(uuid.uuid4())
    recorder.reset()
    claim = claim_standalone(
        node.tracker, client, inst, Flavor(2, 1024, 0), project_id="p1", user_id="u1"
    )
    assert recorder.requests == [("PUT", f"/allocations/{inst}", 204)]
    root = node.tracker.node_uuid
    # a zero amount (no local disk) is not written: Placement refuses zeros
    assert allocations_of(operator, inst) == {root: {"VCPU": 2, "MEMORY_MB": 1024}}
    body = get(operator, f"/allocations/{inst}")
    assert (body["project_id"], body["user_id"], body["consumer_type"]) == ("p1", "u1", "INSTANCE")
    assert claim.resources["VCPU"] == 2
    assert inst in {i.uuid for i in node.tracker.snapshot().instances}


def test_a_retried_write_finds_its_allocation_present(node, client):
    inst = str(uuid.uuid4())
    root = node.tracker.node_uuid
    owner = {"project_id": "p", "user_id": "u", "consumer_type": "INSTANCE"}
    assert write_allocations(client, inst, {root: {"VCPU": 1}}, **owner) == WRITTEN
    assert write_allocations(client, inst, {root: {"VCPU": 1}}, **owner) == PRESENT


def test_refused_for_capacity_rolls_the_local_claim_back(node, operator, client):
    root = node.tracker.node_uuid
    # Someone the tracker does not know about holds nearly all the memory
    # Placement offers (reserved: 512 and the demo host's untracked guests):
    # the local check passes, Placement's does not.
    memory = get(operator, f"/resource_providers/{root}/inventories")["inventories"]["MEMORY_MB"]
    taken = memory["total"] - memory["reserved"] - 100
    put_allocation(operator, str(uuid.uuid4()), {root: {"MEMORY_MB": taken}})
    inst = str(uuid.uuid4())
    before = node.tracker.snapshot()
    with pytest.raises(errors.AllocationRefused) as err:
        claim_standalone(node.tracker, client, inst, Flavor(1, 1024), project_id="p", user_id="u")
    assert err.value.code == "placement.allocation_refused"
    after = node.tracker.snapshot()
    assert after.instances == before.instances and after.usage == before.usage
    # nothing of ours is in Placement: nothing to heal
    assert inst not in after.released
    assert allocations_of(operator, inst) == {}


def test_refused_when_the_consumer_holds_other_allocations(node, operator, client):
    root = node.tracker.node_uuid
    inst = str(uuid.uuid4())
    put_allocation(operator, inst, {root: {"MEMORY_MB": 64}})
    with pytest.raises(errors.AllocationRefused, match="already holds"):
        claim_standalone(node.tracker, client, inst, Flavor(1, 128), project_id="p", user_id="u")
    assert node.tracker.snapshot().instances == ()
    assert inst not in node.tracker.snapshot().released  # not ours: never healed
    assert allocations_of(operator, inst) == {root: {"MEMORY_MB": 64}}


def test_unreachable_placement_rolls_back_and_healing_cleans_a_landed_write(
    node, operator, client, placement
):
    """The write's answer is lost: the claim is rolled back but stays
    released, so if the allocation landed after all, healing removes it."""
    root = node.tracker.node_uuid
    inst = str(uuid.uuid4())
    down = PlacementClient(make_adapter("http://127.0.0.1:9"))
    with pytest.raises(errors.PlacementUnavailable):
        claim_standalone(node.tracker, down, inst, Flavor(1, 128), project_id="p", user_id="u")
    snap = node.tracker.snapshot()
    assert snap.instances == () and inst in snap.released
    # pretend the write landed before the connection dropped
    put_allocation(operator, inst, {root: {"VCPU": 1, "MEMORY_MB": 128}})
    healer = AllocationHealer(client)
    healer.heal(snap.released, [root])
    result = healer.heal(node.tracker.snapshot().released, [root])
    assert result.healed == {inst}
    node.tracker.forget_released(result.healed)
    assert allocations_of(operator, inst) == {}
    assert node.tracker.snapshot().released == frozenset()


def test_a_refused_retry_does_not_roll_back_a_claim_it_did_not_create(node, operator, client):
    """The claim exists (made earlier); a retried standalone call whose write
    Placement refuses must leave it alone."""
    uid = str(uuid.uuid4())
    node.tracker.instance_claim(uid, Flavor(1, 256, 1))
    # The scheduler already allocated something else for this consumer.
    put_allocation(operator, uid, {node.tracker.node_uuid: {"VCPU": 2}})
    with pytest.raises(errors.AllocationRefused):
        claim_standalone(node.tracker, client, uid, Flavor(1, 256, 1), project_id="p", user_id="u")
    assert uid in {i.uuid for i in node.tracker.snapshot().instances}
