# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A virt driver's child providers keep their UUIDs from one reading to the
next (rtagent.nova.hostdriver).

nova's virt drivers make up a UUID for a child provider they do not find by
name in the tree they are handed, and nova's libvirt driver looks a build's
allocated providers up in the last tree it was handed (a vGPU's mdev). Each
build now reads its node after the claim (as nova's tracker asks its driver
at each claim), so a reading that renamed the children made every vGPU build
fail with "Resource Provider ... is missing" (nova's
``regressions.test_bug_2074219``).
"""

import uuid

from rtagent.nova.hostdriver import NovaHostDriver

NODE = "node1"
NODE_UUID = str(uuid.uuid4())


class ChildMakingDriver:
    """What nova's drivers do with the tree they are handed: add a child
    by name unless it is there, set its inventory, keep the tree."""

    def __init__(self):
        self.children = ["pgpu_0000:81:00.0"]
        self.last_tree = None

    def get_available_nodes(self):
        return [NODE]

    def get_available_resource(self, nodename):
        return {
            "uuid": NODE_UUID,
            "vcpus": 4,
            "memory_mb": 4096,
            "local_gb": 40,
            "hypervisor_type": "fake",
            "hypervisor_version": 1,
        }

    def update_provider_tree(self, tree, nodename):
        for name in self.children:
            if not tree.exists(name):
                tree.new_child(name, nodename)
            tree.update_inventory(name, {"VGPU": {"total": 4}})
        for provider_uuid in tree.get_provider_uuids():
            name = tree.data(provider_uuid).name
            if name != nodename and name not in self.children:
                tree.remove(name)
        self.last_tree = tree


def _children(view):
    return {p.name: p.uuid for p in view.providers if p.parent_uuid is not None}


def test_a_child_keeps_its_uuid_across_readings():
    virt = ChildMakingDriver()
    driver = NovaHostDriver(virt)
    first = _children(driver.read_host())
    second = _children(driver.read_node(NODE))
    assert first == second
    # The driver's own tree holds the same UUID: what a build's allocation
    # is looked up in.
    assert virt.last_tree.data("pgpu_0000:81:00.0").uuid == first["pgpu_0000:81:00.0"]


def test_a_new_child_gets_a_uuid_and_a_removed_one_is_gone():
    virt = ChildMakingDriver()
    driver = NovaHostDriver(virt)
    kept = _children(driver.read_host())["pgpu_0000:81:00.0"]
    virt.children = ["pgpu_0000:81:00.0", "pgpu_0000:82:00.0"]
    grown = _children(driver.read_host())
    assert grown["pgpu_0000:81:00.0"] == kept
    assert grown["pgpu_0000:82:00.0"] != kept
    virt.children = ["pgpu_0000:82:00.0"]
    assert _children(driver.read_host()) == {"pgpu_0000:82:00.0": grown["pgpu_0000:82:00.0"]}


def test_after_a_restart_the_children_take_the_uuids_placement_has():
    # A new process: the driver makes up UUIDs, the sync keeps Placement's
    # (rtagent.placement.reader.same_names) and tells the host driver, whose
    # next reading hands the driver Placement's UUIDs.
    from rtagent.placement.tree import Provider, ProviderTree

    virt = ChildMakingDriver()
    driver = NovaHostDriver(virt)
    made_up = _children(driver.read_host())["pgpu_0000:81:00.0"]
    in_placement = str(uuid.uuid4())
    driver.published(
        NODE_UUID,
        ProviderTree(
            [
                Provider(uuid=NODE_UUID, name=NODE),
                Provider(uuid=in_placement, name="pgpu_0000:81:00.0", parent_uuid=NODE_UUID),
            ]
        ),
    )
    assert made_up != in_placement
    assert _children(driver.read_node(NODE)) == {"pgpu_0000:81:00.0": in_placement}
    assert virt.last_tree.data("pgpu_0000:81:00.0").uuid == in_placement
