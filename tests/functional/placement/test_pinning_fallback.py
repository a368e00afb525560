"""nova's upgrade fallback in a real Placement: a host without
``cpu_dedicated_set`` pins guests on its shared CPUs and counts their vCPUs
as VCPU; once the operator sets ``cpu_dedicated_set`` and restarts, the
pinned guests' VCPU allocations move to PCPU in the one ``POST /reshaper``
that adds the PCPU inventory (nova's VCPU-to-PCPU reshape).

The host is the 2-socket one of ``tests/functional/numa_host.py`` (32
CPUs), read by the real libvirt driver and published by an agent built as
the service builds it.
"""

import uuid

import pytest

from rtagent.placement.backoff import SyncBackoff
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter as make_adapter
from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder, put_allocation
from tests.functional.numa_host import two_socket_driver
from tests.functional.placement.conftest import allocations_of, get

pytestmark = pytest.mark.functional

PINNED = {"hw:cpu_policy": "dedicated"}
ALL_CPUS = "0-31"
GUEST, GUEST2, FLOATING, MOVING, MIGRATION = (str(uuid.UUID(int=n)) for n in range(1, 6))
OTHER_NODE = str(uuid.UUID(int=99))


@pytest.fixture
def make_host_agent(placement, make_conf, tmp_path):
    """Agents on the 2-socket host over one state directory; each may be
    given its own ``[compute]`` CPU options (a restart after the operator
    changed them)."""
    (tmp_path / "numa-instances").mkdir()
    agents = []

    def make(dedicated=None, observer=None, **options):
        conf = make_conf(
            rtagent__reserve_untracked_usage=False,
            compute__cpu_dedicated_set=dedicated,
            **options,
        )
        driver = two_socket_driver(
            str(tmp_path / "numa-instances"), dedicated=dedicated, shared=None
        )
        agent = builder.build_agent(
            conf,
            driver=driver,
            adapter=make_adapter(placement.endpoint),
            observer=observer,
            make_backoff=lambda: SyncBackoff(window=0),
        )
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


def inventories(operator, node):
    return get(operator, f"/resource_providers/{node}/inventories")["inventories"]


def on_node(operator, consumer, node):
    return allocations_of(operator, consumer).get(node)


def test_without_dedicated_set_pinned_guests_pin_shared_cpus_as_vcpu(make_host_agent):
    agent = make_host_agent()
    agent.audit()
    tracker = agent.tracker
    claim = tracker.instance_claim(GUEST, Flavor(4, 1024), extra_specs=PINNED)
    assert dict(claim.resources) == {"VCPU": 4, "MEMORY_MB": 1024}
    pinned = {int(p) for cell in claim.numa.describe() for p in cell["pinning"].values()}
    assert len(pinned) == 4
    # A floating guest beside it: nova counts it against every CPU, pinned ones too.
    tracker.instance_claim(FLOATING, Flavor(2, 512))
    cells = tracker.snapshot().numa_cells
    assert all(cell.pcpuset == cell.cpuset for cell in cells)
    assert sum(len(cell.pinned) for cell in cells) == 4
    # The pinned CPUs are not offered again.
    second = tracker.instance_claim(GUEST2, Flavor(4, 1024), extra_specs=PINNED)
    again = {int(p) for cell in second.numa.describe() for p in cell["pinning"].values()}
    assert not again & pinned


def test_the_fallback_can_be_turned_off(make_host_agent):
    agent = make_host_agent(compute__cpu_pinning_fallback=False)
    agent.audit()
    with pytest.raises(errors.ComputeResourcesUnavailable):
        agent.tracker.instance_claim(GUEST, Flavor(2, 512), extra_specs=PINNED)
    assert all(not cell.pcpuset for cell in agent.tracker.snapshot().numa_cells)


def test_setting_the_dedicated_set_reshapes_pinned_guests_in_one_call(make_host_agent, operator):
    agent = make_host_agent()
    node = agent.audit().snapshot.node_uuid
    assert "PCPU" not in inventories(operator, node)
    tracker = agent.tracker
    # The scheduler's fallback allocations, as nova writes them.
    for guest, flavor in ((GUEST, Flavor(2, 512)), (GUEST2, Flavor(4, 1024))):
        put_allocation(operator, guest, {node: {"VCPU": flavor.vcpus, "MEMORY_MB": 512}})
        tracker.instance_claim(guest, flavor, extra_specs=PINNED)
    # A pinned guest migrating away: its source side is the migration's.
    put_allocation(operator, MIGRATION, {node: {"VCPU": 2, "MEMORY_MB": 512}})
    tracker.instance_claim(MOVING, Flavor(2, 512), extra_specs=PINNED)
    tracker.start_move(
        MIGRATION,
        MOVING,
        "migration",
        source_node=node,
        dest_node=OTHER_NODE,
        old_flavor=Flavor(2, 512),
        extra_specs=PINNED,
    )
    tracker.finish_move(MIGRATION)
    agent.audit()
    agent.close()

    # The operator sets cpu_dedicated_set to the host's every CPU and restarts.
    recorder = Recorder()
    agent = make_host_agent(dedicated=ALL_CPUS, observer=recorder)
    agent.audit()
    invs = inventories(operator, node)
    assert invs["PCPU"]["total"] == 32
    assert "VCPU" not in invs
    assert on_node(operator, GUEST, node) == {"PCPU": 2, "MEMORY_MB": 512}
    assert on_node(operator, GUEST2, node) == {"PCPU": 4, "MEMORY_MB": 512}
    assert on_node(operator, MIGRATION, node) == {"PCPU": 2, "MEMORY_MB": 512}
    usages = get(operator, f"/resource_providers/{node}/usages")["usages"]
    assert usages["PCPU"] == 8
    writes = [(m, url) for m, url, _ in recorder.requests if m in ("PUT", "POST")]
    assert [w for w in writes if w[1].startswith("/reshaper")] == [("POST", "/reshaper")]
    assert not [w for w in writes if w[1].startswith("/allocations")]
    # The claims count PCPU too, kept in the store.
    held = {i.uuid: dict(i.resources) for i in agent.tracker.snapshot().instances}
    assert held[GUEST] == {"PCPU": 2, "MEMORY_MB": 512}
    agent.close()
    agent = make_host_agent(dedicated=ALL_CPUS)
    held = {i.uuid: dict(i.resources) for i in agent.tracker.snapshot().instances}
    assert held[GUEST2] == {"PCPU": 4, "MEMORY_MB": 1024}
