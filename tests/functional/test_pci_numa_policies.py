"""NUMA policies of PCI requests on the libvirt test driver: the SR-IOV host
(tests/fixtures/libvirt/test-driver-sriov-host.xml: VFs of an X710 on NUMA
node 0, a Tesla T4 on node 1) given the 2-socket host's NUMA facts
(tests/functional/numa_host.py: cell 0 on socket 0, cell 1 on socket 1), read
by rtagent's real libvirt driver into an agent built as the service builds
it. A one-cell guest asks for a VF and the GPU together: only a policy that
lets a device off the guest's cell gives both; asked alone, each device
draws the guest's cell to its own, unless the policy is ``preferred``."""

import uuid

import pytest

from rtagent.pci.errors import DevicesUnavailable
from rtagent.placement.backoff import SyncBackoff
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter as make_adapter
from rtagent.tracker.model import Flavor
from tests.functional.numa_host import DEDICATED, SHARED, two_socket_driver
from tests.functional.test_pci_tracking import GPU, VFS, host_uri

pytestmark = pytest.mark.functional

VF_SPEC = '{"vendor_id": "8086", "product_id": "154c"}'
GPU_SPEC = '{"vendor_id": "10de", "product_id": "1eb8"}'
ALIASES = [
    '{"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}',
    '{"name": "t4", "vendor_id": "10de", "product_id": "1eb8"}',
]
ONE_CELL = {"hw:numa_nodes": "1"}


@pytest.fixture
def agent(placement, make_conf, tmp_path):
    conf = make_conf(
        libvirt__connection_uri=host_uri(tmp_path),
        compute__cpu_dedicated_set=DEDICATED,
        compute__cpu_shared_set=SHARED,
        pci__device_spec=[VF_SPEC, GPU_SPEC],
        pci__alias=ALIASES,
    )
    (tmp_path / "instances").mkdir(exist_ok=True)
    driver = two_socket_driver(str(tmp_path / "instances"), host_uri(tmp_path))
    built = builder.build_agent(
        conf,
        driver=driver,
        adapter=make_adapter(placement.endpoint),
        make_backoff=lambda: SyncBackoff(window=0),
    )
    built.audit()
    yield built
    built.close()


def claim(agent, *requests):
    return agent.tracker.instance_claim(
        str(uuid.uuid4()), Flavor(2, 1024), extra_specs=ONE_CELL, pci_requests=list(requests)
    )


def both(policy):
    return (
        {"alias": "vf", "count": 1, "numa_policy": policy},
        {"alias": "t4", "count": 1, "numa_policy": policy},
    )


def test_the_host_has_two_cells_on_two_sockets_and_devices_on_each(agent):
    snap = agent.tracker.snapshot()
    assert [(c.id, c.socket) for c in snap.host.numa_cells] == [(0, 0), (1, 1)]
    assert {d.address: d.host.numa_node for d in snap.pci_devices} == {
        **{vf: 0 for vf in VFS},
        GPU: 1,
    }


@pytest.mark.parametrize("policy", ["required", "legacy", "socket"])
def test_a_policy_that_keeps_devices_on_the_guest_cells_cannot_give_both(agent, policy):
    before = agent.tracker.snapshot()
    with pytest.raises(DevicesUnavailable):
        claim(agent, *both(policy))
    assert agent.tracker.snapshot().instances == before.instances


def test_preferred_gives_both_one_off_the_guest_cell(agent):
    placed = claim(agent, *both("preferred"))
    (cell,) = {f.host_cell for f in placed.numa.fits}
    numa_nodes = sorted(h.numa_node for h in placed.pci_devices)
    assert numa_nodes == [0, 1]
    assert cell in (0, 1)


@pytest.mark.parametrize(("alias", "node"), [("vf", 0), ("t4", 1)])
@pytest.mark.parametrize("policy", ["required", "legacy", "socket"])
def test_a_device_alone_draws_the_guest_to_its_cell(agent, alias, node, policy):
    placed = claim(agent, {"alias": alias, "count": 1, "numa_policy": policy})
    assert {f.host_cell for f in placed.numa.fits} == {node}
    assert [h.numa_node for h in placed.pci_devices] == [node]


def test_preferred_does_not_move_the_guest_for_its_device(agent):
    # Every cell will do, so the cells are tried as nova orders them for a
    # guest with PCI requests: the most free devices first (cell 0's VFs).
    placed = claim(agent, {"alias": "t4", "count": 1, "numa_policy": "preferred"})
    assert {f.host_cell for f in placed.numa.fits} == {0}
    assert [h.address for h in placed.pci_devices] == [GPU]
