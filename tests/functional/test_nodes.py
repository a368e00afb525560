"""Several nodes per agent (nova's nodename): a tracker and a provider tree
per node, against the real Placement app."""

import dataclasses
import uuid

import pytest

from rtagent.service import builder
from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from rtagent.virt.driver import HostDriver
from rtagent.virt.host import HostView
from tests.functional.conftest import make_adapter

pytestmark = pytest.mark.functional

NODE_A = HostView("node-a", "IRONIC", 1, vcpus=8, memory_mb=16384, local_gb=100)
NODE_B = dataclasses.replace(NODE_A, hypervisor_hostname="node-b", vcpus=4)


class NodesDriver(HostDriver):
    """A host driver that reports whatever node list the test sets."""

    def __init__(self, views):
        self.views = list(views)

    def read_host(self):
        return self.views[0]

    def read_nodes(self):
        return list(self.views)


@pytest.fixture
def two_node_agent(placement, make_conf):
    driver = NodesDriver([NODE_A, NODE_B])
    agent = builder.build_agent(
        make_conf(), driver=driver, adapter=make_adapter(placement.endpoint)
    )
    yield agent, driver
    agent.close()


def test_each_node_gets_a_tracker_and_a_root_provider(two_node_agent, operator):
    agent, _ = two_node_agent
    result = agent.audit()
    assert len(result.nodes) == 2
    names = {}
    for node_uuid, (snapshot, _) in result.nodes.items():
        body = operator.get(f"/resource_providers/{node_uuid}").json()
        names[body["name"]] = node_uuid
        assert snapshot.hypervisor_hostname == body["name"]
    assert set(names) == {"node-a", "node-b"}
    vcpu = operator.get(f"/resource_providers/{names['node-b']}/inventories").json()
    assert vcpu["inventories"]["VCPU"]["total"] == 4
    # claims are per node
    agent.nodes.get(names["node-b"]).instance_claim(str(uuid.uuid4()), Flavor(4, 64))
    assert agent.nodes.get(names["node-a"]).snapshot().usage["VCPU"] == 0


def test_a_node_that_disappears_leaves_the_view_and_comes_back_with_its_claims(
    two_node_agent, operator
):
    agent, driver = two_node_agent
    nodes = agent.audit().nodes
    b = next(u for u, (s, _) in nodes.items() if s.hypervisor_hostname == "node-b")
    claim = agent.nodes.get(b).instance_claim(str(uuid.uuid4()), Flavor(2, 64))

    driver.views = [NODE_A]
    result = agent.audit()
    assert agent.nodes.removed == (b,)
    with pytest.raises(errors.NodeNotFound):
        agent.nodes.get(b)
    # its provider is not deleted behind the operator's back
    assert operator.get(f"/resource_providers/{b}").status_code == 200
    # the only node left is the primary node
    assert list(result.nodes) == [agent.nodes.primary_uuid]

    driver.views = [NODE_A, NODE_B]
    result = agent.audit()
    assert b in result.nodes  # same UUID for the same name
    assert [i.uuid for i in agent.nodes.get(b).snapshot().instances] == [claim.instance_uuid]


def test_a_single_renamed_node_keeps_its_uuid(placement, make_conf, operator):
    driver = NodesDriver([NODE_A])
    agent = builder.build_agent(
        make_conf(), driver=driver, adapter=make_adapter(placement.endpoint)
    )
    try:
        first = agent.audit().snapshot.node_uuid
        driver.views = [dataclasses.replace(NODE_A, hypervisor_hostname="node-a.example.org")]
        again = agent.audit().snapshot.node_uuid
        assert again == first == agent.nodes.primary_uuid
        body = operator.get(f"/resource_providers/{first}").json()
        assert body["name"] == "node-a.example.org"
    finally:
        agent.close()


def test_a_node_the_driver_names_by_uuid_is_that_node(placement, make_conf, operator):
    # nova's virt drivers own node identity (the ComputeNode's UUID): a view
    # that carries one is that node, first start or not, renamed or not.
    a_uuid, b_uuid = str(uuid.uuid4()), str(uuid.uuid4())
    driver = NodesDriver(
        [
            dataclasses.replace(NODE_A, node_uuid=a_uuid),
            dataclasses.replace(NODE_B, node_uuid=b_uuid),
        ]
    )
    agent = builder.build_agent(
        make_conf(), driver=driver, adapter=make_adapter(placement.endpoint), node_uuid=a_uuid
    )
    try:
        result = agent.audit()
        assert agent.nodes.primary_uuid == a_uuid
        assert set(result.nodes) == {a_uuid, b_uuid}
        driver.views = [dataclasses.replace(NODE_B, hypervisor_hostname="b2", node_uuid=b_uuid)]
        agent.audit()
        assert operator.get(f"/resource_providers/{b_uuid}").json()["name"] == "b2"
    finally:
        agent.close()


def test_a_reading_taken_outside_the_audit_changes_only_what_it_changes(two_node_agent, operator):
    # The embedded agent's build reads its node after a claim and hands the
    # reading over (rtagent.nova.link.LocalLink.reread): the nodes it
    # changed are returned for the prompt sync; nothing is synced here.
    agent, _ = two_node_agent
    result = agent.audit()
    names = {snap.hypervisor_hostname: uuid_ for uuid_, (snap, _) in result.nodes.items()}
    assert agent.take_reading([NODE_A, NODE_B]) == set()
    grown = dataclasses.replace(NODE_B, local_gb=250)
    assert agent.take_reading([grown]) == {names["node-b"]}
    assert agent.nodes.get(names["node-b"]).snapshot().host.local_gb == 250
    # Not in Placement until a sync runs; then it is.
    disk = f"/resource_providers/{names['node-b']}/inventories/DISK_GB"
    assert operator.get(disk).json()["total"] == 100
    agent.sync_changed({names["node-b"]})
    assert operator.get(disk).json()["total"] == 250
    # A node the audit has not added is left to the audit; none is removed.
    stranger = dataclasses.replace(NODE_A, hypervisor_hostname="node-c")
    assert agent.take_reading([stranger]) == set()
    assert len(list(agent.nodes.trackers())) == 2
