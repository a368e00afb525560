"""The Placement sync against the real Placement app (its own fixture)."""

import dataclasses
import os
import uuid

import pytest

from rtagent.placement import errors
from rtagent.tracker import errors as tracker_errors
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder, make_adapter, put_allocation

pytestmark = pytest.mark.functional


def get(adapter, url):
    response = adapter.get(url)
    assert response.status_code == 200, response.text
    return response.json()


def test_first_audit_publishes_what_the_host_and_config_imply(make_agent, make_conf, operator):
    conf = make_conf(reserved_host_cpus=1, reserved_host_disk_mb=2048, ram_allocation_ratio=1.5)
    agent = make_agent(conf)
    host = agent.driver.read_host()
    result = agent.audit()
    node = result.snapshot.node_uuid

    provider = get(operator, f"/resource_providers/{node}")
    assert provider["name"] == host.hypervisor_hostname
    invs = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    summary = {
        rc: (inv["total"], inv["reserved"], inv["allocation_ratio"], inv["max_unit"])
        for rc, inv in invs.items()
    }
    # demo-host.xml via the test driver: 3 online CPUs, 32768 MiB; disk is
    # the real filesystem under tmp_path. Its running and paused guests have
    # no claim: 7 vCPUs and 7168 MiB, reserved over the ratios (rounded up).
    st = os.statvfs(conf.libvirt.instances_path)
    disk_gb = st.f_frsize * st.f_blocks // 2**30
    assert summary == {
        "VCPU": (3, 1 + 2, 4.0, 3),  # initial_cpu_allocation_ratio; 7 / 4.0
        "MEMORY_MB": (32768, 512 + 4779, 1.5, 32768),  # configured ratio; 7168 / 1.5
        "DISK_GB": (disk_gb, 2, 1.0, disk_gb),
    }
    assert all(inv["min_unit"] == 1 and inv["step_size"] == 1 for inv in invs.values())
    traits = get(operator, f"/resource_providers/{node}/traits")["traits"]
    # HW_ARCH_I686: the test driver's host CPU arch, as nova reports it.
    assert sorted(traits) == ["COMPUTE_NODE", "HW_ARCH_I686", "OWNER_NOVA"]


def test_steady_state_costs_one_read_and_no_write(make_agent):
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    agent.audit()
    for _ in range(3):
        agent.tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 256, 1))
    recorder.reset()
    for _ in range(5):
        agent.audit()
    assert [(m, u.split("?")[0], s) for m, u, s in recorder.requests] == [
        ("GET", "/resource_providers", 200)
    ] * 5


def test_conflict_from_another_writer_converges_and_keeps_its_trait(make_agent, operator):
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    node = agent.tracker.node_uuid
    operator.put("/traits/CUSTOM_RACK_7")

    def interfere(method, url):
        # Between our read of the provider and our trait write, an operator
        # adds a trait: our generation is now stale.
        if method == "PUT" and url.endswith("/traits"):
            recorder.hook = None
            body = get(operator, f"/resource_providers/{node}/traits")
            resp = operator.put(
                f"/resource_providers/{node}/traits",
                json={
                    "resource_provider_generation": body["resource_provider_generation"],
                    "traits": body["traits"] + ["CUSTOM_RACK_7"],
                },
            )
            assert resp.status_code == 200, resp.text

    recorder.hook = interfere
    result = agent.audit()
    assert result.sync.attempts == 2
    traits = set(get(operator, f"/resource_providers/{node}/traits")["traits"])
    assert traits == {"COMPUTE_NODE", "HW_ARCH_I686", "OWNER_NOVA", "CUSTOM_RACK_7"}
    assert recorder.count("PUT") >= 3  # inventories, the conflicting traits, the retry
    # and the next tick sees nothing to do
    recorder.reset()
    assert agent.audit().sync.operations == ()
    assert recorder.count() == 1


def test_operator_ratio_is_kept_when_none_is_configured(make_agent, operator):
    agent = make_agent()
    node = agent.audit().snapshot.node_uuid
    invs = get(operator, f"/resource_providers/{node}/inventories")
    vcpu = dict(invs["inventories"]["VCPU"], allocation_ratio=1.0)
    resp = operator.put(
        f"/resource_providers/{node}/inventories/VCPU",
        json=dict(vcpu, resource_provider_generation=invs["resource_provider_generation"]),
    )
    assert resp.status_code == 200, resp.text

    assert agent.audit().sync.operations == ()
    after = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    assert after["VCPU"]["allocation_ratio"] == 1.0
    # claims now use Placement's ratio: 3 VCPU x 1.0
    with pytest.raises(tracker_errors.ComputeResourcesUnavailable):
        agent.tracker.instance_claim(str(uuid.uuid4()), Flavor(4, 64))


def test_configured_ratio_wins_over_placement(make_agent, make_conf, operator):
    agent = make_agent(make_conf(cpu_allocation_ratio=2.0))
    node = agent.audit().snapshot.node_uuid
    invs = get(operator, f"/resource_providers/{node}/inventories")
    vcpu = dict(invs["inventories"]["VCPU"], allocation_ratio=9.0)
    operator.put(
        f"/resource_providers/{node}/inventories/VCPU",
        json=dict(vcpu, resource_provider_generation=invs["resource_provider_generation"]),
    )
    agent.audit()
    after = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    assert after["VCPU"]["allocation_ratio"] == 2.0


def test_name_taken_by_another_provider_is_a_clear_error(make_agent, operator):
    agent = make_agent()
    name = agent.driver.read_host().hypervisor_hostname
    resp = operator.post("/resource_providers", json={"name": name, "uuid": str(uuid.uuid4())})
    assert resp.status_code == 200
    with pytest.raises(errors.ProviderNameTaken, match="compute_id"):
        agent.audit()


def test_endless_conflicts_exhaust_the_policy_with_a_typed_error(make_agent, make_conf, operator):
    recorder = Recorder()
    # No pause between attempts: the policy's pauses are tested on their own.
    agent = make_agent(make_conf(rtagent__sync_retry_delay=0.0), observer=recorder)
    node = agent.tracker.node_uuid
    agent.audit()
    operator.put("/traits/CUSTOM_NOISE")
    flips = []

    def interfere(method, url):
        if method == "PUT":
            body = get(operator, f"/resource_providers/{node}/traits")
            operator.put(
                f"/resource_providers/{node}/traits",
                json={
                    "resource_provider_generation": body["resource_provider_generation"],
                    "traits": sorted(set(body["traits"]) ^ {"CUSTOM_NOISE"}),
                },
            )
            flips.append(url)

    # make our root need a write: drop COMPUTE_NODE behind our back
    body = get(operator, f"/resource_providers/{node}/traits")
    operator.put(
        f"/resource_providers/{node}/traits",
        json={"resource_provider_generation": body["resource_provider_generation"], "traits": []},
    )
    recorder.hook = interfere
    with pytest.raises(errors.SyncConflictsExhausted):
        agent.audit()
    assert len(flips) == 4  # sync_max_attempts
    recorder.hook = None
    agent.audit()  # the next tick converges
    assert "COMPUTE_NODE" in get(operator, f"/resource_providers/{node}/traits")["traits"]


def test_placement_down_fails_the_sync_but_not_claims(make_conf, tmp_path):
    from rtagent.service import builder

    # a port nothing listens on
    agent = builder.build_agent(make_conf(), adapter=make_adapter("http://127.0.0.1:9"))
    try:
        with pytest.raises(errors.PlacementUnavailable):
            agent.audit()
        claim = agent.tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 128))
        assert claim.resources["VCPU"] == 1
    finally:
        agent.close()


def test_refused_write_leaves_the_view_true_and_others_inventory_alone(make_agent, operator):
    """An operator's CUSTOM_GOLD inventory on our root survives our syncs; when
    Placement refuses one of our writes the view is not updated from it."""
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    node = agent.audit().snapshot.node_uuid
    operator.put("/resource_classes/CUSTOM_GOLD")
    invs = get(operator, f"/resource_providers/{node}/inventories")
    resp = operator.post(
        f"/resource_providers/{node}/inventories",
        json={
            "resource_class": "CUSTOM_GOLD",
            "total": 5,
            "resource_provider_generation": invs["resource_provider_generation"],
        },
    )
    assert resp.status_code == 201, resp.text
    # nothing of ours changed: the foreign class is carried, not removed
    assert agent.audit().sync.operations == ()
    gold = get(operator, f"/resource_providers/{node}/inventories")["inventories"]["CUSTOM_GOLD"]
    assert gold["total"] == 5

    # Ask to drop DISK_GB (ours) while it is allocated: Placement refuses.
    consumer = str(uuid.uuid4())
    put_allocation(operator, consumer, {node: {"DISK_GB": 1, "CUSTOM_GOLD": 1}})
    host = agent.driver.read_host()
    agent.driver.read_host = lambda: dataclasses.replace(host, local_gb=0)
    before = agent.sync.view.get(node)
    with pytest.raises(errors.InventoryInUse):
        agent.audit()
    assert (
        agent.sync.view.get(node)
        == before.replace(generation=get(operator, f"/resource_providers/{node}")["generation"])
        or agent.sync.view.get(node).inventories == before.inventories
    )
    assert "DISK_GB" in agent.sync.view.get(node).inventories
    # the refused write did not cost a full re-read on the next tick
    recorder.reset()
    with pytest.raises(errors.InventoryInUse):
        agent.audit()
    assert recorder.count("GET") == 1


def test_foreign_child_provider_is_left_alone_at_steady_cost(make_agent, operator):
    recorder = Recorder()
    agent = make_agent(observer=recorder)
    node = agent.audit().snapshot.node_uuid
    child = str(uuid.uuid4())
    resp = operator.post(
        "/resource_providers",
        json={"name": "someone-elses-child", "uuid": child, "parent_provider_uuid": node},
    )
    assert resp.status_code == 200, resp.text
    operator.put("/traits/CUSTOM_FOREIGN")
    resp = operator.put(
        f"/resource_providers/{child}/traits",
        json={"resource_provider_generation": 0, "traits": ["CUSTOM_FOREIGN"]},
    )
    assert resp.status_code == 200, resp.text
    recorder.reset()
    for _ in range(3):
        assert agent.audit().sync.operations == ()
    assert recorder.count() == 3  # one listing per tick; the child is never read
    assert get(operator, f"/resource_providers/{child}/traits")["traits"] == ["CUSTOM_FOREIGN"]
