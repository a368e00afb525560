"""A child provider the host driver stops reporting while the agent is down
is deleted after the restart: the agent's store remembers the children it
published (``placement_children:<node>``), and nothing else is deleted.

The libvirt test driver reports no child providers, so a thin wrapper adds
one to its real readings, as nova's virt drivers do through
``update_provider_tree``.
"""

import dataclasses

import pytest

from rtagent.placement.backoff import SyncBackoff
from rtagent.service import builder
from rtagent.service.builder import libvirt_driver
from rtagent.testing.placement_server import admin_adapter
from rtagent.virt.host import ProviderFacts

pytestmark = pytest.mark.functional

SEV = "5e75e75e-0000-4000-8000-000000000001"


class WithChild:
    """The configured libvirt driver, its readings with one child provider
    (``child_uuid``) while ``reporting``."""

    def __init__(self, driver, child_uuid):
        self._driver = driver
        self.child_uuid = child_uuid
        self.reporting = True
        self.node_uuid = None  # the agent's node, once built

    def __getattr__(self, name):
        return getattr(self._driver, name)

    def read_nodes(self):
        views = self._driver.read_nodes()
        if not self.reporting:
            return views
        return [dataclasses.replace(v, providers=(self._child(v),)) for v in views]

    def read_host(self):
        return self.read_nodes()[0]

    def _child(self, view):
        node = view.node_uuid or self.node_uuid
        return ProviderFacts(
            uuid=self.child_uuid,
            name=f"{view.hypervisor_hostname}_amd_sev",
            parent_uuid=node,
            inventories=(("MEM_ENCRYPTION_CONTEXT", (("max_unit", 1), ("total", 16))),),
            traits=frozenset({"HW_CPU_X86_AMD_SEV"}),
        )


def build(conf, placement, child_uuid):
    driver = WithChild(libvirt_driver(conf), child_uuid)
    agent = builder.build_agent(
        conf,
        driver=driver,
        adapter=admin_adapter(placement.endpoint),
        make_backoff=lambda: SyncBackoff(window=0),
    )
    driver.node_uuid = agent.tracker.node_uuid
    return agent, driver


def tree(operator, root):
    body = operator.get(f"/resource_providers?in_tree={root}").json()
    return {p["uuid"]: p["name"] for p in body["resource_providers"]}


def test_a_child_dropped_while_the_agent_was_down_is_deleted_after_the_restart(
    placement, operator, make_conf
):
    conf = make_conf()
    agent, _driver = build(conf, placement, SEV)
    try:
        agent.audit()
        root = agent.tracker.node_uuid
        assert SEV in tree(operator, root)
        theirs = operator.post(
            "/resource_providers",
            json={"name": "someone-elses", "parent_provider_uuid": root},
            headers={"OpenStack-API-Version": "placement 1.20"},
        ).json()["uuid"]
    finally:
        agent.close()

    agent, driver = build(conf, placement, SEV)
    driver.reporting = False
    try:
        agent.audit()
        assert set(tree(operator, root)) == {root, theirs}
    finally:
        agent.close()


def test_a_child_reported_under_a_new_uuid_after_a_restart_keeps_its_own(
    placement, operator, make_conf
):
    conf = make_conf()
    agent, _driver = build(conf, placement, SEV)
    try:
        agent.audit()
        root = agent.tracker.node_uuid
    finally:
        agent.close()

    # nova's drivers make up a new UUID for each child of a fresh tree.
    agent, _driver = build(conf, placement, "5e75e75e-0000-4000-8000-000000000002")
    try:
        agent.audit()
        agent.audit()
        names = tree(operator, root)
        assert set(names) == {root, SEV}
    finally:
        agent.close()
