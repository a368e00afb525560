"""PCI devices in a real Placement (``[pci] report_in_placement``), on the
test driver's SR-IOV host (an X710 PF 0000:3b:00.0 with 4 VFs on NUMA node
0, a Tesla T4 on node 1): the child providers, their inventories and
traits, the allocations standalone claims write on them, the ones a
scheduler left out added, healing, one read per steady tick, and the option
turned on and off with the allocations of existing instances reshaped both
ways."""

import uuid

import pytest

from rtagent.pci import errors
from rtagent.placement import pci_providers
from rtagent.placement.passes.pci_devices import DeviceAllocations
from rtagent.placement.pci_providers import provider_uuid
from rtagent.placement.standalone import claim_standalone
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder, put_allocation
from tests.functional.placement.conftest import allocations_of, get
from tests.functional.test_pci_tracking import DOMAIN, GPU, PF, VFS, host_uri

pytestmark = pytest.mark.functional

# The VFs by their ids (the PF itself matches no spec: nova reports one or
# the other), the GPU with a resource class and a trait of its own.
VF_SPEC = '{"vendor_id": "8086", "product_id": "154c", "live_migratable": "yes"}'
GPU_SPEC = '{"vendor_id": "10de", "product_id": "1eb8", "resource_class": "t4", "traits": "ml"}'
# The PF alone, for neutron: stays off Placement.
PHYSNET_SPEC = '{"vendor_id": "8086", "product_id": "1572", "physical_network": "physnet1"}'
ALIASES = [
    '{"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}',
    '{"name": "t4", "vendor_id": "10de", "product_id": "1eb8", "resource_class": "CUSTOM_T4"}',
]
VF_RC, GPU_RC = "CUSTOM_PCI_8086_154C", "CUSTOM_T4"
BOTH = [{"alias": "t4", "count": 1}, {"alias": "vf", "count": 2}]


@pytest.fixture
def pci_agent(make_agent, make_conf, tmp_path):
    def make(report=True, specs=(VF_SPEC, GPU_SPEC), domains="", observer=None):
        conf = make_conf(
            libvirt__connection_uri=host_uri(tmp_path, domains),
            pci__device_spec=list(specs),
            pci__alias=ALIASES,
            pci__report_in_placement=report,
        )
        agent = make_agent(conf, observer=observer)
        agent.audit()
        return agent

    return make


def providers(operator, root):
    listed = get(operator, f"/resource_providers?in_tree={root}")["resource_providers"]
    return {p["uuid"]: p for p in listed if p["uuid"] != root}


def claim(agent, requests=BOTH, inst=None):
    inst = inst or str(uuid.uuid4())
    agent.claim_standalone(
        inst, Flavor(1, 512, 0), project_id="p", user_id="u", pci_requests=list(requests)
    )
    return inst


def test_devices_are_child_providers_with_nova_names_inventories_and_traits(pci_agent, operator):
    agent = pci_agent(specs=(VF_SPEC, GPU_SPEC, PHYSNET_SPEC))
    snap = agent.tracker.snapshot()
    root, host = snap.node_uuid, snap.hypervisor_hostname
    nic_rp, gpu_rp = provider_uuid(root, PF), provider_uuid(root, GPU)

    found = providers(operator, root)
    assert {u: (p["name"], p["parent_provider_uuid"]) for u, p in found.items()} == {
        nic_rp: (f"{host}_0000:3B:00.0", root),
        gpu_rp: (f"{host}_0000:AF:00.0", root),
    }  # the physnet PF: none
    nic = get(operator, f"/resource_providers/{nic_rp}/inventories")["inventories"]
    gpu = get(operator, f"/resource_providers/{gpu_rp}/inventories")["inventories"]
    assert {rc: (i["total"], i["reserved"], i["max_unit"]) for rc, i in nic.items()} == {
        VF_RC: (4, 0, 4)
    }
    assert {rc: (i["total"], i["reserved"], i["max_unit"]) for rc, i in gpu.items()} == {
        GPU_RC: (1, 0, 1)
    }
    assert set(get(operator, f"/resource_providers/{nic_rp}/traits")["traits"]) == {
        "COMPUTE_MANAGED_PCI_DEVICE",
        "OWNER_NOVA",
        "HW_PCI_LIVE_MIGRATABLE",
    }
    assert set(get(operator, f"/resource_providers/{gpu_rp}/traits")["traits"]) == {
        "COMPUTE_MANAGED_PCI_DEVICE",
        "OWNER_NOVA",
        "CUSTOM_ML",
    }


def test_a_standalone_claim_writes_its_devices_allocations_and_healing_removes_them(
    pci_agent, operator
):
    agent = pci_agent()
    root = agent.tracker.node_uuid
    inst = claim(agent)
    assert allocations_of(operator, inst) == {
        root: {"VCPU": 1, "MEMORY_MB": 512},
        provider_uuid(root, GPU): {GPU_RC: 1},
        provider_uuid(root, PF): {VF_RC: 2},
    }
    agent.audit()  # nothing to change: the inventories stay
    assert get(operator, f"/resource_providers/{provider_uuid(root, PF)}/usages")["usages"] == {
        VF_RC: 2
    }

    agent.tracker.abort_instance_claim(inst)
    agent.audit()  # released: seen once
    agent.audit()  # the same generation again: healed
    assert allocations_of(operator, inst) == {}


def test_a_steady_tick_with_pci_providers_is_one_read(pci_agent, operator):
    recorder = Recorder()
    agent = pci_agent(observer=recorder)
    claim(agent)
    agent.audit()
    agent.audit()
    recorder.reset()
    agent.audit()
    assert recorder.requests == [("GET", "/resource_providers", 200)]


def test_turned_on_and_off_the_instances_allocations_are_reshaped_both_ways(pci_agent, operator):
    first = pci_agent(report=False)
    root = first.tracker.node_uuid
    nic_rp, gpu_rp = provider_uuid(root, PF), provider_uuid(root, GPU)
    inst = claim(first)
    flavor_only = {root: {"VCPU": 1, "MEMORY_MB": 512}}
    assert allocations_of(operator, inst) == flavor_only
    assert providers(operator, root) == {}
    first.close()

    on = pci_agent(report=True)
    assert set(providers(operator, root)) == {nic_rp, gpu_rp}
    assert allocations_of(operator, inst) == {
        **flavor_only,
        gpu_rp: {GPU_RC: 1},
        nic_rp: {VF_RC: 2},
    }
    later = claim(on, [{"alias": "vf", "count": 1}])
    on.audit()
    on.close()

    off = pci_agent(report=False)
    assert providers(operator, root) == {}
    assert allocations_of(operator, inst) == flavor_only
    assert allocations_of(operator, later) == {root: {"VCPU": 1, "MEMORY_MB": 512}}
    off.audit()  # nothing left to do: no request fails, no provider comes back
    assert providers(operator, root) == {}
    off.close()

    again = pci_agent(report=True)
    assert allocations_of(operator, later)[nic_rp] == {VF_RC: 1}
    assert get(operator, f"/resource_providers/{nic_rp}/usages")["usages"] == {VF_RC: 3}
    again.audit()


def test_turning_on_reshapes_a_consumer_written_before_consumer_types(pci_agent, operator):
    # A scheduler of an older microversion wrote the flavor's allocation:
    # Placement shows its consumer type as "unknown", which it refuses on
    # write. The agent's claim is local (no user_id), as under nova.
    first = pci_agent(report=False)
    root = first.tracker.node_uuid
    inst = str(uuid.uuid4())
    first.tracker.instance_claim(inst, Flavor(1, 512, 0), pci_requests=list(BOTH))
    body = {
        "allocations": {root: {"resources": {"VCPU": 1, "MEMORY_MB": 512}}},
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": None,
    }
    put = operator.put(f"/allocations/{inst}", json=body, microversion="1.28")
    assert put.status_code == 204, put.text
    assert get(operator, f"/allocations/{inst}")["consumer_type"] == "unknown"
    first.close()

    pci_agent(report=True)
    assert allocations_of(operator, inst) == {
        root: {"VCPU": 1, "MEMORY_MB": 512},
        provider_uuid(root, GPU): {GPU_RC: 1},
        provider_uuid(root, PF): {VF_RC: 2},
    }
    assert get(operator, f"/allocations/{inst}")["consumer_type"] == "INSTANCE"


def test_a_device_a_domain_holds_without_a_claim_is_reserved(pci_agent, operator):
    # DOMAIN, started by hand, holds a VF and the GPU.
    agent = pci_agent(domains=DOMAIN)
    root = agent.tracker.node_uuid
    nic = get(operator, f"/resource_providers/{provider_uuid(root, PF)}/inventories")
    gpu = get(operator, f"/resource_providers/{provider_uuid(root, GPU)}/inventories")
    assert (nic["inventories"][VF_RC]["total"], nic["inventories"][VF_RC]["reserved"]) == (4, 1)
    assert (gpu["inventories"][GPU_RC]["total"], gpu["inventories"][GPU_RC]["reserved"]) == (1, 1)
    assert VFS[3] in {h.address for h in agent.tracker.snapshot().pci_held}


def test_a_pf_with_its_vfs_stops_the_sync_with_one_clear_error(
    pci_agent, make_agent, make_conf, tmp_path
):
    both = '{"address": "0000:3b:*"}'  # the PF and, through it, its VFs
    agent = make_agent(
        make_conf(
            libvirt__connection_uri=host_uri(tmp_path),
            pci__device_spec=[both],
            pci__report_in_placement=True,
        )
    )
    with pytest.raises(errors.PlacementLayoutInvalid) as err:
        agent.audit()
    status = agent.sync_status()[agent.tracker.node_uuid]
    assert status["in_sync"] is False
    assert status["last_error"] == f"pci.placement_layout_invalid: {err.value}"
    assert str(err.value) == (
        "PCI devices under 0000:3b:00.0 cannot be reported to Placement: the PF and its VFs "
        "are both tracked; nova reports one or the other (narrow [pci] device_spec to the "
        "PF or to its VFs)"
    )


def test_a_restart_finds_its_providers_and_writes_nothing(pci_agent, operator):
    first = pci_agent()
    inst = claim(first)
    first.audit()
    before = allocations_of(operator, inst)
    first.close()

    recorder = Recorder()
    second = pci_agent(observer=recorder)  # its first audit
    second.audit()
    assert [r for r in recorder.requests if r[0] != "GET"] == []
    assert allocations_of(operator, inst) == before


def test_a_spec_whose_class_and_traits_changed_leaves_nothing_of_the_old_ones(pci_agent, operator):
    first = pci_agent()
    root = first.tracker.node_uuid
    gpu_rp = provider_uuid(root, GPU)
    first.close()

    # The GPU's spec now names another class and another trait.
    changed = GPU_SPEC.replace('"t4"', '"t4_big"').replace('"ml"', '"hpc"')
    pci_agent(specs=(VF_SPEC, changed))
    inventories = get(operator, f"/resource_providers/{gpu_rp}/inventories")["inventories"]
    assert set(inventories) == {"CUSTOM_T4_BIG"}
    assert set(get(operator, f"/resource_providers/{gpu_rp}/traits")["traits"]) == {
        "COMPUTE_MANAGED_PCI_DEVICE",
        "OWNER_NOVA",
        "CUSTOM_HPC",
    }


def test_a_one_time_use_device_stays_reserved_after_its_free_until_an_operator_clears_it(
    pci_agent, operator
):
    otu = GPU_SPEC.replace("}", ', "one_time_use": "true"}')
    agent = pci_agent(specs=(VF_SPEC, otu))
    gpu_rp = provider_uuid(agent.tracker.node_uuid, GPU)
    url = f"/resource_providers/{gpu_rp}/inventories"

    def reserved():
        return get(operator, url)["inventories"][GPU_RC]["reserved"]

    assert reserved() == 0
    assert "HW_PCI_ONE_TIME_USE" in get(operator, f"/resource_providers/{gpu_rp}/traits")["traits"]
    inst = claim(agent, [{"alias": "t4", "count": 1}])
    agent.audit()
    assert reserved() == 1
    agent.tracker.abort_instance_claim(inst)
    for _ in range(3):  # healing, then steady
        agent.audit()
    assert allocations_of(operator, inst) == {}
    assert reserved() == 1  # the device must be made ready first

    body = get(operator, url)
    body["inventories"][GPU_RC]["reserved"] = 0
    assert operator.put(url, json=body).status_code == 200  # the operator did
    agent.audit()
    assert reserved() == 0
    claim(agent, [{"alias": "t4", "count": 1}])
    agent.audit()
    assert reserved() == 1


def test_turning_on_again_after_a_kill_between_the_create_and_the_reshape(pci_agent, operator):
    first = pci_agent(report=False)
    root, host = first.tracker.node_uuid, first.tracker.snapshot().hypervisor_hostname
    inst = claim(first)
    first.close()
    # What a kill -9 right after the provider's create leaves: the GPU's
    # provider, empty; the reshape that fills it never ran.
    gpu_rp = provider_uuid(root, GPU)
    body = {"uuid": gpu_rp, "name": f"{host}_0000:AF:00.0", "parent_provider_uuid": root}
    assert operator.post("/resource_providers", json=body).status_code == 200

    pci_agent(report=True)
    assert allocations_of(operator, inst)[gpu_rp] == {GPU_RC: 1}
    assert allocations_of(operator, inst)[provider_uuid(root, PF)] == {VF_RC: 2}


def test_a_claim_whose_device_allocations_cannot_be_computed_is_undone(pci_agent, client):
    agent = pci_agent()
    inst = str(uuid.uuid4())

    def refuse(held):
        raise errors.PlacementLayoutInvalid(address=GPU, reason="as the audit would say")

    with pytest.raises(errors.PlacementLayoutInvalid):
        claim_standalone(
            agent.tracker,
            client,
            inst,
            Flavor(1, 512, 0),
            project_id="p",
            user_id="u",
            pci_requests=[{"alias": "t4", "count": 1}],
            pci_allocations=refuse,
        )
    snap = agent.tracker.snapshot()
    # Nothing was sent to Placement: nothing to heal, the device is free.
    assert inst not in snap.known_consumers
    assert snap.pci_devices.get(GPU).status == "available"


def scheduled(agent, operator, requests=BOTH, on_root=True):
    """A claim as nova's scheduler without PCI in Placement makes it: the
    flavor allocated on the root only, the claim local (no user_id)."""
    inst = str(uuid.uuid4())
    root = agent.tracker.node_uuid
    if on_root:
        put_allocation(operator, inst, {root: {"VCPU": 1, "MEMORY_MB": 512}})
    agent.tracker.instance_claim(inst, Flavor(1, 512, 0), pci_requests=list(requests))
    return inst


def test_devices_a_scheduler_left_out_of_the_allocation_are_added_once(pci_agent, operator):
    recorder = Recorder()
    agent = pci_agent(observer=recorder)
    root = agent.tracker.node_uuid
    inst = scheduled(agent, operator)
    agent.audit()
    assert allocations_of(operator, inst) == {
        root: {"VCPU": 1, "MEMORY_MB": 512},
        provider_uuid(root, GPU): {GPU_RC: 1},
        provider_uuid(root, PF): {VF_RC: 2},
    }
    body = get(operator, f"/allocations/{inst}")
    assert (body["project_id"], body["user_id"]) == ("proj", "user")
    assert get(operator, f"/resource_providers/{provider_uuid(root, PF)}/usages")["usages"] == {
        VF_RC: 2
    }
    recorder.reset()
    agent.audit()
    agent.audit()
    assert [r for r in recorder.requests if inst in r[1]] == []


def test_a_consumer_that_holds_nothing_on_the_node_is_left_alone(pci_agent, operator):
    # Its allocation is elsewhere or gone: adding the devices would count
    # them for a guest Placement does not place here.
    agent = pci_agent()
    inst = scheduled(agent, operator, on_root=False)
    agent.audit()
    assert allocations_of(operator, inst) == {}


def test_a_concurrent_write_is_a_conflict_and_the_next_pass_adds_the_devices(pci_agent, operator):
    recorder = Recorder()
    agent = pci_agent(observer=recorder)
    root = agent.tracker.node_uuid
    inst = scheduled(agent, operator, [{"alias": "t4", "count": 1}])

    def resize_first(method, url):
        # The scheduler rewrites the consumer between the agent's read and
        # its write (once).
        if method == "PUT" and url.endswith(f"/allocations/{inst}"):
            recorder.hook = None
            generation = get(operator, f"/allocations/{inst}")["consumer_generation"]
            put_allocation(operator, inst, {root: {"VCPU": 2, "MEMORY_MB": 1024}}, generation)

    recorder.hook = resize_first
    agent.audit()
    assert ("PUT", f"/allocations/{inst}", 409) in recorder.requests
    assert allocations_of(operator, inst) == {root: {"VCPU": 2, "MEMORY_MB": 1024}}
    agent.audit()
    assert allocations_of(operator, inst) == {
        root: {"VCPU": 2, "MEMORY_MB": 1024},
        provider_uuid(root, GPU): {GPU_RC: 1},
    }


def test_many_consumers_at_once_cost_one_read_per_device_provider(
    pci_agent, operator, client, recorder
):
    agent = pci_agent()
    root = agent.tracker.node_uuid
    first = scheduled(agent, operator, [{"alias": "vf", "count": 1}])
    agent.audit()  # healed by the agent's own checker
    second = scheduled(agent, operator, [{"alias": "vf", "count": 1}])
    third = scheduled(agent, operator, [{"alias": "t4", "count": 1}])
    held = pci_providers.report(agent.tracker.snapshot(), True).held
    assert set(held) == {first, second, third}

    # A checker that knows none of them, as after a restart.
    found = DeviceAllocations(client, max_consumer_reads=2)
    recorder.reset()
    assert found.check(root, held) == tuple(sorted((second, third)))
    reads = [url for m, url, _ in recorder.requests if m == "GET"]
    bulk = [u for u in reads if u.startswith("/resource_providers/")]
    assert sorted(bulk) == sorted(
        f"/resource_providers/{provider_uuid(root, a)}/allocations" for a in (PF, GPU)
    )
    # The consumer already right is not read on its own; the others are
    # read for the write based on them.
    assert sorted(u for u in reads if u.startswith("/allocations/")) == sorted(
        f"/allocations/{c}" for c in (second, third)
    )
    assert allocations_of(operator, second)[provider_uuid(root, PF)] == {VF_RC: 1}
    assert allocations_of(operator, third)[provider_uuid(root, GPU)] == {GPU_RC: 1}
    recorder.reset()
    assert found.check(root, held) == ()
    assert recorder.requests == []


def test_a_same_host_resize_is_left_alone_until_it_is_confirmed(pci_agent, operator):
    # During the resize both the old VF and the new VFs belong to the
    # instance, and the migration holds the old side's allocation: adding
    # them all to the instance would count the old VF twice.
    agent = pci_agent()
    root = agent.tracker.node_uuid
    nic_rp = provider_uuid(root, PF)
    inst = scheduled(agent, operator, [{"alias": "vf", "count": 1}])
    agent.audit()
    old = allocations_of(operator, inst)
    assert old[nic_rp] == {VF_RC: 1}

    # The scheduler moves the old allocation to the migration and gives the
    # instance the new flavor, both without new devices.
    mig = str(uuid.uuid4())
    generation = get(operator, f"/allocations/{inst}")["consumer_generation"]
    put_allocation(operator, mig, old, consumer_type="MIGRATION")
    put_allocation(operator, inst, {root: {"VCPU": 2, "MEMORY_MB": 1024}}, generation)
    agent.tracker.start_move(
        mig,
        inst,
        "resize",
        source_node=root,
        dest_node=root,
        old_flavor=Flavor(1, 512, 0),
        new_flavor=Flavor(2, 1024, 0),
        pci_requests=[{"alias": "vf", "count": 2}],
    )
    agent.audit()
    assert allocations_of(operator, inst) == {root: {"VCPU": 2, "MEMORY_MB": 1024}}

    agent.tracker.confirm_move(mig)
    generation = get(operator, f"/allocations/{mig}")["consumer_generation"]
    put_allocation(operator, mig, {}, generation)  # the conductor drops it
    agent.audit()
    assert allocations_of(operator, inst) == {
        root: {"VCPU": 2, "MEMORY_MB": 1024},
        nic_rp: {VF_RC: 2},
    }


def test_devices_attached_and_detached_are_added_to_and_taken_from_the_allocation(
    pci_agent, operator
):
    agent = pci_agent()
    root = agent.tracker.node_uuid
    nic_rp, gpu_rp = provider_uuid(root, PF), provider_uuid(root, GPU)
    inst = scheduled(agent, operator, [{"alias": "vf", "count": 2, "request_id": "vfs"}])
    agent.audit()
    flavor = {root: {"VCPU": 1, "MEMORY_MB": 512}}
    assert allocations_of(operator, inst) == {**flavor, nic_rp: {VF_RC: 2}}

    (gpu,) = agent.tracker.attach_pci_devices(
        inst, [{"alias": "t4", "count": 1, "request_id": "port"}]
    )
    agent.audit()
    assert allocations_of(operator, inst) == {**flavor, nic_rp: {VF_RC: 2}, gpu_rp: {GPU_RC: 1}}

    # One VF and the GPU given back: one VF stays counted, the GPU leaves.
    vf = next(
        h.address
        for h in agent.tracker.snapshot().instances[0].pci_devices
        if h.request_id == "vfs"
    )
    agent.tracker.detach_pci_devices(inst, [vf, gpu.address])
    agent.audit()
    assert allocations_of(operator, inst) == {**flavor, nic_rp: {VF_RC: 1}}

    # The last one: the allocation is the flavor's again.
    (last,) = (h.address for h in agent.tracker.snapshot().instances[0].pci_devices)
    agent.tracker.detach_pci_devices(inst, [last])
    agent.audit()
    assert allocations_of(operator, inst) == flavor
    assert get(operator, f"/resource_providers/{nic_rp}/usages")["usages"] == {VF_RC: 0}


def test_an_audit_survives_a_provider_deleted_outside_and_claims_placement_never_knew(
    pci_agent, operator, caplog
):
    """Issue 49, defect 4: with the node's providers deleted from Placement
    (their allocations first, as Placement requires) and a claim Placement
    never had an allocation of (a row copied to a new UUID), the recreated
    tree's devices were seeded from every claim, and the consumer Placement
    does not know failed every audit (KeyError 'project_id'). Now the tree
    is recreated and each such consumer is passed over with a warning."""
    agent = pci_agent()
    root = agent.tracker.node_uuid
    known = claim(agent)
    unknown = str(uuid.uuid4())  # a local claim: no allocation in Placement
    agent.tracker.instance_claim(unknown, Flavor(1, 512, 0), pci_requests=[BOTH[1]])
    operator.delete(f"/allocations/{known}")
    for rp in (provider_uuid(root, PF), provider_uuid(root, GPU), root):
        assert operator.delete(f"/resource_providers/{rp}").status_code == 204
    caplog.set_level("WARNING")
    agent.audit()
    agent.audit()
    status = agent.sync_status()[root]
    assert status["in_sync"] is True and status["last_error"] is None, status
    assert set(providers(operator, root)) == {provider_uuid(root, PF), provider_uuid(root, GPU)}
    assert allocations_of(operator, unknown) == {}
    warned = [r.getMessage() for r in caplog.records if "holds nothing" in r.getMessage()]
    assert any(unknown in w for w in warned), warned
