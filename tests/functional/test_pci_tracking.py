"""PCI devices tracked by the real agent, on libvirt's test driver with the
SR-IOV host (tests/fixtures/libvirt/test-driver-sriov-host.xml: an X710 PF
0000:3b:00.0 named ens1f0 with 4 VFs, on NUMA node 0; a Tesla T4 on node 1;
their root port): the devices ``[pci] device_spec`` matches, the pools in
the compute-node view, a spec changed across a restart, a device that a
domain holds without a claim (the test driver's domains can hold a PCI
``<hostdev>``), and what ``rtagent status`` says of them."""

import pathlib
import subprocess
import time

import pytest

from rtagent.cmd.status import render
from rtagent.pci import devices, errors, model, pools
from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.rpc.status import node_status
from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.ports import free_port
from rtagent.tracker import errors as tracker_errors
from rtagent.tracker.model import Flavor
from tests.functional.test_cli import RTAGENT, rtagent, write_conf

pytestmark = pytest.mark.functional

HOST_XML = (
    pathlib.Path(__file__).resolve().parents[1]
    / "fixtures"
    / "libvirt"
    / "test-driver-sriov-host.xml"
)
PF, GPU, ROOT_PORT = "0000:3b:00.0", "0000:af:00.0", "0000:3a:00.0"
VFS = tuple(f"0000:3b:02.{fn}" for fn in range(4))
# The PF by its interface name: the spec takes the PF and, through it, its
# VFs (matched with their parent). The GPU by its ids.
NIC_SPEC = '{"devname": "ens1f0", "physical_network": "physnet1"}'
GPU_SPEC = '{"vendor_id": "10de", "product_id": "1eb8", "resource_class": "CUSTOM_T4"}'
NIC_TAGS = {"physical_network": "physnet1"}
# A guest started by hand, with the last VF (the one a claim takes first,
# as nova) and the GPU passed through.
BY_HAND = "1a6e0c3e-0000-4000-8000-0000000000aa"
DOMAIN = f"""<domain type='test'>
  <name>by-hand</name>
  <uuid>{BY_HAND}</uuid>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os><type>hvm</type></os>
  <devices>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x3b' slot='0x02' function='0x3'/></source>
    </hostdev>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0xaf' slot='0x00' function='0x0'/></source>
    </hostdev>
  </devices>
</domain>
"""
VF_POOL = {
    "vendor_id": "8086",
    "product_id": "154c",
    "numa_node": 0,
    "count": 4,
    "tags": {
        "dev_type": model.TYPE_VF,
        "address": PF,
        "physical_network": "physnet1",
        "remote_managed": "false",
    },
}
PF_POOL = {
    "vendor_id": "8086",
    "product_id": "1572",
    "numa_node": 0,
    "count": 1,
    "tags": {
        "dev_type": model.TYPE_PF,
        "address": PF,
        "physical_network": "physnet1",
        "remote_managed": "false",
    },
}
# resource_class is Placement's to match: nova leaves it out of pools.
GPU_POOL = {
    "vendor_id": "10de",
    "product_id": "1eb8",
    "numa_node": 1,
    "count": 1,
    "tags": {"dev_type": model.TYPE_PCI, "address": GPU},
}


def host_uri(tmp_path, domains=""):
    """A test-driver URI of the SR-IOV host, with ``domains`` (XML) defined
    and running on it."""
    path = tmp_path / "sriov-host.xml"
    path.write_text(HOST_XML.read_text().replace("</node>", domains + "</node>"))
    return f"test://{path}"


@pytest.fixture
def sriov_agent(make_agent, make_conf, tmp_path):
    def make(*specs, domains="", aliases=()):
        conf = make_conf(
            libvirt__connection_uri=host_uri(tmp_path, domains),
            pci__device_spec=list(specs),
            pci__alias=list(aliases),
        )
        agent = make_agent(conf)
        agent.audit()
        return agent

    return make


def tracked(agent):
    return {
        d.address: (d.host.dev_type, dict(d.tags), d.status, d.instance_uuid)
        for d in agent.tracker.snapshot().pci_devices
    }


def compute_node(agent):
    reply = AgentEndpoint(agent, "host-1", "192.0.2.7").get_compute_node({})
    assert reply["ok"], reply
    return reply["result"]


def status_text(agent):
    return render({"host": "host-1", "nodes": [node_status(agent.tracker.snapshot())]})


def test_the_devices_the_specs_match_are_tracked_and_pooled(sriov_agent):
    agent = sriov_agent(NIC_SPEC, GPU_SPEC)

    assert tracked(agent) == {
        PF: (model.TYPE_PF, NIC_TAGS, devices.AVAILABLE, None),
        **{vf: (model.TYPE_VF, NIC_TAGS, devices.AVAILABLE, None) for vf in VFS},
        GPU: (model.TYPE_PCI, {"resource_class": "CUSTOM_T4"}, devices.AVAILABLE, None),
    }  # the root port matches no spec: not tracked
    # nova's pools: the VFs of one PF together on NUMA 0, the PF (listed,
    # as nova lists it) and the GPU on NUMA 1 each alone.
    assert compute_node(agent)["pci_device_pools"] == [GPU_POOL, VF_POOL, PF_POOL]
    assert agent.tracker.snapshot().pci_held == ()

    # The PF is offered only to a request that asks for a PF.
    table = agent.tracker.snapshot().pci_devices
    with pytest.raises(errors.DevicesUnavailable, match="PFs or remote-managed"):
        pools.select(table, [pools.PciRequest("any-x710", 5, ({"vendor_id": "8086"},))])
    asked = pools.PciRequest("pf", 1, ({"vendor_id": "8086", "dev_type": model.TYPE_PF},))
    assert pools.select(table, [asked]) == {"pf": (PF,)}


def test_without_a_matching_spec_nothing_is_tracked(sriov_agent):
    agent = sriov_agent()
    assert tracked(agent) == {}
    assert compute_node(agent)["pci_device_pools"] == []
    assert "  PCI devices: none matched by [pci] device_spec" in status_text(agent).splitlines()


def test_a_spec_changed_across_a_restart(sriov_agent):
    first = sriov_agent(NIC_SPEC, GPU_SPEC)
    assert len(tracked(first)) == 6
    first.close()  # the state directory is the second agent's now

    second = sriov_agent(GPU_SPEC)
    assert set(tracked(second)) == {GPU}
    assert compute_node(second)["pci_device_pools"] == [GPU_POOL]
    lines = status_text(second).splitlines()
    start = lines.index("  PCI devices: 1 tracked, 1 free in 1 pool(s)")
    assert lines[start + 1] == f"    10de:1eb8 type-PCI at {GPU}, NUMA node 1: 1 free"
    assert not lines[start + 2].startswith("    ")


def test_a_device_a_domain_holds_without_a_claim_is_drift_and_never_pooled(sriov_agent):
    # Only the NIC is tracked: the domain's GPU is none of the agent's business.
    agent = sriov_agent(NIC_SPEC, domains=DOMAIN)
    snap = agent.tracker.snapshot()

    assert [(h.address, h.owner, h.domain_name) for h in snap.pci_held] == [
        (VFS[3], BY_HAND, "by-hand")
    ]
    held = tracked(agent)
    assert held[VFS[3]] == (model.TYPE_VF, NIC_TAGS, devices.ALLOCATED, BY_HAND)
    # Its PF cannot be passed through while a VF of it is in a guest.
    assert held[PF][2] == devices.UNAVAILABLE
    assert compute_node(agent)["pci_device_pools"] == [VF_POOL | {"count": 3}]
    # The domain itself is untracked drift too.
    assert [d.uuid for d in snap.drift.untracked] == [BY_HAND]
    drift = node_status(snap)["drift"]
    assert drift["pci_devices_held"] == [{"address": VFS[3], "owner": BY_HAND, "domain": "by-hand"}]

    # A steady audit keeps the very same state: the drift is not rebuilt.
    agent.audit()
    assert agent.tracker.snapshot() is snap


def test_status_of_a_running_agent_lists_pools_and_held_devices(tmp_path):
    port = free_port()
    specs = "".join(f"device_spec = {s}\n" for s in (NIC_SPEC, GPU_SPEC))
    with PlacementServer(db_sync=False) as placement:
        conf = write_conf(
            tmp_path,
            endpoint=placement.endpoint,
            extra=(
                f"[DEFAULT]\ntransport_url =\n[health]\nport = {port}\n"
                f"[libvirt]\nconnection_uri = {host_uri(tmp_path, DOMAIN)}\n[pci]\n{specs}"
            ),
        )
        agent = subprocess.Popen(
            [RTAGENT, "--config-file", str(conf), "run"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert agent.poll() is None
                assert time.monotonic() < deadline, "the agent never synced"
                result = rtagent("--config-file", str(conf), "status", timeout=30)
                if result.returncode == 0 and "placement: in sync" in result.stdout:
                    break
                time.sleep(0.5)
        finally:
            agent.terminate()
            agent.wait(timeout=30)
    lines = result.stdout.splitlines()
    assert (
        "  drift: 1 domain(s) without a claim, 0 instance(s) without a domain, "
        "2 PCI device(s) held without a claim"
    ) in lines
    start = lines.index("  PCI devices: 6 tracked, 3 free in 1 pool(s)")
    assert lines[start + 1 : start + 4] == [
        f"    8086:154c type-VF of PF {PF}, NUMA node 0: 3 free physical_network=physnet1",
        f"    {VFS[3]} held by domain by-hand {BY_HAND} without a claim",
        f"    {GPU} held by domain by-hand {BY_HAND} without a claim",
    ]


NIC_ALIAS = '{"name": "nic", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}'


def test_claimed_devices_survive_a_restart_and_the_guest_holding_them_is_no_drift(sriov_agent):
    first = sriov_agent(NIC_SPEC, GPU_SPEC, aliases=[NIC_ALIAS])
    endpoint = AgentEndpoint(first, "host-1", "192.0.2.7")
    reply = endpoint.instance_claim(
        {},
        instance_uuid=BY_HAND,
        flavor={"vcpus": 1, "memory_mb": 512},
        pci_requests=[{"alias": "nic", "count": 1}],
    )
    assert [d["address"] for d in reply["result"]["pci_devices"]] == [VFS[3]], reply
    first.close()  # the state directory is the second agent's now

    # The guest now runs, with its VF and a GPU no claim gave it.
    second = sriov_agent(NIC_SPEC, GPU_SPEC, aliases=[NIC_ALIAS], domains=DOMAIN)
    held = tracked(second)
    assert held[VFS[3]] == (model.TYPE_VF, NIC_TAGS, devices.ALLOCATED, BY_HAND)
    assert held[GPU][2:] == (devices.ALLOCATED, BY_HAND)
    snap = second.tracker.snapshot()
    assert [(h.address, h.owner) for h in snap.pci_held] == [(GPU, BY_HAND)]  # the VF is claimed
    (instance,) = snap.instances
    assert [h.address for h in instance.pci_devices] == [VFS[3]]
    status = node_status(snap)
    assert [(c["address"], c["owner"]) for c in status["pci"]["claimed"]] == [(VFS[3], BY_HAND)]
    assert compute_node(second)["pci_device_pools"] == [VF_POOL | {"count": 3}]


def test_a_device_attached_to_a_running_instance_survives_a_restart_until_detached(sriov_agent):
    first = sriov_agent(NIC_SPEC, GPU_SPEC, aliases=[NIC_ALIAS])
    inst = "2b6e0c3e-0000-4000-8000-0000000000bb"
    first.tracker.instance_claim(inst, Flavor(1, 512), pci_requests=[{"alias": "nic", "count": 1}])
    port = {"alias": "nic", "count": 1, "request_id": "port-1"}
    (attached,) = first.tracker.attach_pci_devices(inst, [port])
    assert (attached.address, attached.request_id) == (VFS[2], "port-1")
    first.close()

    second = sriov_agent(NIC_SPEC, GPU_SPEC, aliases=[NIC_ALIAS])
    held = tracked(second)
    assert {a for a, d in held.items() if d[3] == inst} == {VFS[3], VFS[2]}
    vf_pools = [p for p in compute_node(second)["pci_device_pools"] if p["product_id"] == "154c"]
    assert vf_pools == [VF_POOL | {"count": 2}]
    # A move of the instance owns its devices: no attach or detach meanwhile.
    node = second.tracker.node_uuid
    mig = "3b6e0c3e-0000-4000-8000-0000000000cc"
    second.tracker.start_move(
        mig, inst, "resize", source_node=node, dest_node=node, old_flavor=Flavor(1, 512)
    )
    with pytest.raises(tracker_errors.DevicesConflict):
        second.tracker.detach_pci_devices(inst, [VFS[2]])
    second.tracker.revert_move(mig)

    assert second.tracker.detach_pci_devices(inst, [VFS[2]]) == (VFS[2],)
    second.close()
    third = sriov_agent(NIC_SPEC, GPU_SPEC, aliases=[NIC_ALIAS])
    assert {a for a, d in tracked(third).items() if d[3] == inst} == {VFS[3]}
