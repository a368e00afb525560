"""Which RPC calls ask for a prompt sync: the endpoint's ``on_change``
follows a mutation that changed the node, not one that repeats its state
(nova's periodic sends the service's state every minute; each repeat used
to cost a Placement sync)."""

import pytest

from rtagent.rpc.endpoint import AgentEndpoint

pytestmark = pytest.mark.functional


def test_set_disabled_asks_for_a_sync_only_when_it_changes_the_node(make_agent):
    agent = make_agent()
    changed = []
    endpoint = AgentEndpoint(agent, "host-1", "192.0.2.7", on_change=changed.append)
    node = agent.tracker.node_uuid

    def set_disabled(**args):
        reply = endpoint.set_disabled({}, node_uuid=node, **args)
        assert reply["ok"], reply
        return reply["result"]

    assert set_disabled(disabled=False) == {"disabled": False, "reason": None}
    assert changed == []  # enabled already: a repeat
    assert set_disabled(disabled=True, reason="maintenance") == {
        "disabled": True,
        "reason": "maintenance",
    }
    assert changed == [node]
    set_disabled(disabled=True, reason="maintenance")
    set_disabled(disabled=True, reason="maintenance")
    assert changed == [node]
    assert agent.tracker.snapshot().disabled == "maintenance"
    set_disabled(disabled=True, reason="drained")  # a new reason is a change
    set_disabled(disabled=False)
    assert changed == [node, node, node]
    assert agent.tracker.snapshot().disabled is None
