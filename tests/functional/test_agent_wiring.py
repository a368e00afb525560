"""The agent's audit ties the Placement pieces together: standalone claims,
healing of released consumers, provider config files, sync state."""

import uuid

import pytest

from rtagent.placement import errors
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder, put_allocation

pytestmark = pytest.mark.functional


def allocations(operator, consumer):
    return operator.get(f"/allocations/{consumer}").json()["allocations"]


def test_standalone_claim_then_abort_or_delete_is_healed_by_the_audit(make_agent, operator):
    agent = make_agent()
    node = agent.audit().snapshot.node_uuid
    uid = str(uuid.uuid4())
    agent.claim_standalone(uid, Flavor(1, 256, 1), project_id="p", user_id="u")
    assert allocations(operator, uid)[node]["resources"] == {
        "VCPU": 1,
        "MEMORY_MB": 256,
        "DISK_GB": 1,
    }
    agent.tracker.abort_instance_claim(uid)
    assert agent.tracker.snapshot().released == {uid}
    agent.audit()  # first pass: seen, not yet removed
    assert allocations(operator, uid)
    agent.audit()  # second pass: unchanged, so removed
    assert allocations(operator, uid) == {}
    assert agent.tracker.snapshot().released == frozenset()
    # Deleted for good: removed at the first pass.
    again = str(uuid.uuid4())
    agent.claim_standalone(again, Flavor(1, 256, 1), project_id="p", user_id="u")
    agent.tracker.update_instance(again, vm_state="deleted")
    agent.audit()
    assert allocations(operator, again) == {}
    assert agent.tracker.snapshot().released == frozenset()


def test_standalone_claim_refused_by_placement_is_rolled_back(make_agent, operator):
    agent = make_agent()
    node = agent.audit().snapshot.node_uuid
    # someone else holds most of the memory in Placement (not in our ledger)
    squatter = str(uuid.uuid4())
    memory = operator.get(f"/resource_providers/{node}/inventories").json()["inventories"]
    free = memory["MEMORY_MB"]["total"] - memory["MEMORY_MB"]["reserved"]
    put_allocation(operator, squatter, {node: {"MEMORY_MB": free - 1000}})
    uid = str(uuid.uuid4())
    with pytest.raises(errors.AllocationRefused):
        agent.claim_standalone(uid, Flavor(1, 4096, 1), project_id="p", user_id="u")
    snap = agent.tracker.snapshot()
    assert uid not in {i.uuid for i in snap.instances}
    assert uid not in snap.released
    # the unknown consumer is reported, never deleted
    assert squatter in agent.report_unknown_consumers()
    assert allocations(operator, squatter)


def test_provider_config_files_reach_placement(make_agent, make_conf, tmp_path, operator):
    configs = tmp_path / "provider_config"
    configs.mkdir()
    (configs / "gold.yaml").write_text(
        """meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_GOLD:
            total: 7
    traits:
      additional:
        - CUSTOM_RACK_A
"""
    )
    agent = make_agent(make_conf(compute__provider_config_location=str(configs)))
    node = agent.audit().snapshot.node_uuid
    invs = operator.get(f"/resource_providers/{node}/inventories").json()["inventories"]
    assert invs["CUSTOM_GOLD"]["total"] == 7
    traits = operator.get(f"/resource_providers/{node}/traits").json()["traits"]
    assert "CUSTOM_RACK_A" in traits and "COMPUTE_NODE" in traits
    assert agent.sync_status()[node]["in_sync"] is True


def test_unknown_consumers_are_reported_after_two_checks_and_left_alone(make_agent, operator):
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    node = agent.audit().snapshot.node_uuid
    agent.audit()
    recorder.reset()
    agent.audit()
    assert recorder.count() == 1  # nothing moved: no check, one read
    squatter = str(uuid.uuid4())
    put_allocation(operator, squatter, {node: {"VCPU": 1}})
    agent.audit()  # the generation moved: first sighting, not reported yet
    assert agent.sync_status()[node]["unknown_consumers"] == []
    agent.audit()  # seen again: reported
    assert agent.sync_status()[node]["unknown_consumers"] == [squatter]
    recorder.reset()
    agent.audit()  # steady again: no more checks of the providers
    # The one read, and the reported consumer read again on its own (its
    # allocation removed would move no generation).
    assert recorder.count() == 2
    assert allocations(operator, squatter)  # never deleted
