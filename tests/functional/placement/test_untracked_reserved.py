"""Issue 13 against the real Placement app and libvirt's test driver: a
running domain no claim accounts for is published as ``reserved``, so
Placement's allocation candidates and the agent's claims agree; it is
released when the domain stops, and not published with the option off."""

import uuid

import libvirt
import pytest

from rtagent.cmd.run import apply_conf
from rtagent.service import builder
from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from rtagent.virt.libvirt import LibvirtDriver
from tests.functional.conftest import Recorder, make_adapter
from tests.functional.placement.conftest import get, put_allocation

pytestmark = pytest.mark.functional

# The test driver reports 3 online CPUs whatever the XML says; 16 GiB.
# The foreign guest: 4 vCPUs (1 CPU at the initial ratio 4.0), 8 GiB.
HOST_XML = """<node>
  <cpu><mhz>2400</mhz><model>x86_64</model><nodes>1</nodes>
    <sockets>1</sockets><cores>2</cores><threads>2</threads></cpu>
  <memory>16777216</memory>
  <domain type="test">
    <name>foreign-1</name>
    <uuid>5c1d7e11-0000-4000-8000-0000000000f1</uuid>
    <memory unit="MiB">8192</memory>
    <currentMemory unit="MiB">8192</currentMemory>
    <vcpu>4</vcpu>
    <os><type>hvm</type></os>
  </domain>
</node>
"""
CPUS, MEMORY = 3, 16384
RESERVED_MEMORY = 512  # [DEFAULT] reserved_host_memory_mb's default
FOREIGN_MEMORY = 8192


class Host:
    """An agent over its own test-driver host, whose connection the test
    keeps so that it can stop the foreign guest behind the agent's back."""

    def __init__(self, tmp_path, placement, make_conf, **overrides):
        path = tmp_path / "host.xml"
        path.write_text(HOST_XML)
        self.conf = make_conf(libvirt__connection_uri=f"test:///{path}", **overrides)
        self.conn = None
        driver = LibvirtDriver(
            self.conf.libvirt.connection_uri, self.conf.libvirt.instances_path, opener=self._open
        )
        self.recorder = Recorder()
        self.agent = builder.build_agent(
            self.conf,
            driver=driver,
            adapter=make_adapter(placement.endpoint),
            observer=self.recorder,
        )
        self.node = self.agent.tracker.node_uuid

    def _open(self, uri):
        self.conn = libvirt.open(uri)
        return self.conn

    def stop_foreign_guest(self):
        self.conn.lookupByName("foreign-1").destroy()


@pytest.fixture
def make_host(tmp_path, placement, make_conf):
    hosts = []

    def make(**overrides):
        host = Host(tmp_path, placement, make_conf, **overrides)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.agent.close()


def reserved(operator, node):
    invs = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    return {rc: inv["reserved"] for rc, inv in invs.items() if rc != "DISK_GB"}


def candidates(operator, resources):
    query = ",".join(f"{rc}:{amount}" for rc, amount in sorted(resources.items()))
    body = get(operator, f"/allocation_candidates?resources={query}")
    return sorted(body["provider_summaries"])


def agent_accepts(tracker, resources):
    """Whether the agent takes a claim of ``resources`` (undone at once)."""
    instance = str(uuid.uuid4())
    flavor = Flavor(resources["VCPU"], resources["MEMORY_MB"])
    try:
        tracker.instance_claim(instance, flavor)
    except errors.ComputeResourcesUnavailable:
        return False
    tracker.abort_instance_claim(instance)
    return True


def claim(host, operator, resources):
    """A build as nova makes it: the scheduler's allocation, then the claim."""
    instance = str(uuid.uuid4())
    put_allocation(operator, instance, {host.node: resources})
    host.agent.tracker.instance_claim(instance, Flavor(resources["VCPU"], resources["MEMORY_MB"]))


def test_a_foreign_guest_is_reserved_and_the_scheduler_agrees(make_host, operator):
    host = make_host()
    host.agent.audit()
    # 4 vCPUs / 4.0 = 1 CPU; memory MiB for MiB.
    assert reserved(operator, host.node) == {
        "VCPU": 1,
        "MEMORY_MB": RESERVED_MEMORY + FOREIGN_MEMORY,
    }
    free_memory = MEMORY - RESERVED_MEMORY - FOREIGN_MEMORY
    claim(host, operator, {"VCPU": 3, "MEMORY_MB": 256})
    claim(host, operator, {"VCPU": 3, "MEMORY_MB": 256})
    host.agent.audit()
    free_memory -= 512
    # (3 - 1) x 4.0 = 8 vCPUs of capacity, 6 claimed: 2 left.
    for resources, fits in [
        ({"VCPU": 1, "MEMORY_MB": free_memory + 1}, False),
        ({"VCPU": 1, "MEMORY_MB": free_memory}, True),
        ({"VCPU": 3, "MEMORY_MB": 64}, False),
        ({"VCPU": 2, "MEMORY_MB": 64}, True),
    ]:
        assert agent_accepts(host.agent.tracker, resources) is fits, resources
        assert candidates(operator, resources) == ([host.node] if fits else []), resources

    # Steady state: nothing changed, nothing written.
    host.recorder.reset()
    host.agent.audit()
    assert host.recorder.count() - host.recorder.count("GET") == 0


def test_the_reservation_is_released_when_the_guest_stops(make_host, operator):
    host = make_host()
    host.agent.audit()
    assert reserved(operator, host.node)["MEMORY_MB"] == RESERVED_MEMORY + FOREIGN_MEMORY
    host.stop_foreign_guest()
    host.agent.audit()
    assert reserved(operator, host.node) == {"VCPU": 0, "MEMORY_MB": RESERVED_MEMORY}
    everything = {"VCPU": CPUS, "MEMORY_MB": MEMORY - RESERVED_MEMORY}
    assert agent_accepts(host.agent.tracker, everything)
    assert candidates(operator, everything) == [host.node]


def test_with_the_option_off_only_the_configured_amounts_are_reserved(
    make_host, operator, make_conf
):
    host = make_host(rtagent__reserve_untracked_usage=False, reserved_host_cpus=1)
    host.agent.audit()
    assert reserved(operator, host.node) == {"VCPU": 1, "MEMORY_MB": RESERVED_MEMORY}
    # The agent still counts the guest as used, on its own.
    free_memory = MEMORY - RESERVED_MEMORY - FOREIGN_MEMORY
    assert not agent_accepts(host.agent.tracker, {"VCPU": 1, "MEMORY_MB": free_memory + 1})
    assert agent_accepts(host.agent.tracker, {"VCPU": 1, "MEMORY_MB": free_memory})

    # Turned on by a reload (SIGHUP), the next tick publishes the guest.
    apply_conf(host.conf, make_conf(reserved_host_cpus=1), host.agent)
    host.agent.audit()
    assert reserved(operator, host.node) == {
        "VCPU": 2,
        "MEMORY_MB": RESERVED_MEMORY + FOREIGN_MEMORY,
    }
