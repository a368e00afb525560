"""Nova's traits on the root: OWNER_NOVA always, COMPUTE_STATUS_DISABLED
while the node is disabled; custom traits created when missing."""

import pytest

from rtagent.placement.sync import ProviderSync
from rtagent.placement.tree import Provider, ProviderTree
from tests.functional.placement.conftest import get

pytestmark = pytest.mark.functional


def traits_of(operator, rp):
    return set(get(operator, f"/resource_providers/{rp}/traits")["traits"])


def test_disabling_the_node_sets_the_trait_and_enabling_removes_it(make_agent, operator):
    agent = make_agent()
    root = agent.tracker.node_uuid
    operator.put("/traits/CUSTOM_OPERATOR_MARK")
    agent.audit()
    gen = get(operator, f"/resource_providers/{root}")["generation"]
    operator.put(
        f"/resource_providers/{root}/traits",
        json={
            "resource_provider_generation": gen,
            "traits": sorted(traits_of(operator, root) | {"CUSTOM_OPERATOR_MARK"}),
        },
    )
    assert {"COMPUTE_NODE", "OWNER_NOVA"} <= traits_of(operator, root)
    assert "COMPUTE_STATUS_DISABLED" not in traits_of(operator, root)

    agent.tracker.set_disabled("maintenance window")
    agent.audit()
    assert {"COMPUTE_STATUS_DISABLED", "CUSTOM_OPERATOR_MARK"} <= traits_of(operator, root)

    agent.tracker.set_disabled(None)
    agent.audit()
    after = traits_of(operator, root)
    assert "COMPUTE_STATUS_DISABLED" not in after
    assert {"COMPUTE_NODE", "OWNER_NOVA", "CUSTOM_OPERATOR_MARK"} <= after


def test_disabled_survives_a_restart(make_agent, make_conf, operator):
    conf = make_conf()
    agent = make_agent(conf)
    agent.tracker.set_disabled("drained")
    agent.close()
    again = make_agent(conf)
    root = again.audit().snapshot.node_uuid
    assert "COMPUTE_STATUS_DISABLED" in traits_of(operator, root)


def test_custom_traits_and_classes_are_created_once_when_missing(client, recorder, operator):
    root = "9f1a2b3c-0000-4000-8000-00000000000a"
    desired = ProviderTree(
        [
            Provider(
                uuid=root,
                name="host-a",
                traits=frozenset({"COMPUTE_NODE", "CUSTOM_GPU_FAMILY_X"}),
                managed_traits=frozenset({"COMPUTE_NODE", "CUSTOM_GPU_FAMILY_X"}),
                inventories=_inv({"CUSTOM_MAGIC": 4}),
                managed_classes=frozenset({"CUSTOM_MAGIC"}),
            )
        ]
    )
    sync = ProviderSync(client)
    sync.sync(desired)
    assert traits_of(operator, root) == {"COMPUTE_NODE", "CUSTOM_GPU_FAMILY_X"}
    invs = get(operator, f"/resource_providers/{root}/inventories")["inventories"]
    assert invs["CUSTOM_MAGIC"]["total"] == 4
    created = [u for m, u, _ in recorder.requests if m == "PUT" and "/resource_providers" not in u]
    assert sorted(created) == ["/resource_classes/CUSTOM_MAGIC", "/traits/CUSTOM_GPU_FAMILY_X"]
    recorder.reset()
    sync.sync(desired)
    assert recorder.count() == 1


def _inv(totals):
    from rtagent.resources import Inventory, frozen_map

    return frozen_map({rc: Inventory(total=t, max_unit=t) for rc, t in totals.items()})
