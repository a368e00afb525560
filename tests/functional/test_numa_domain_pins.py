"""Domains already pinned on a NUMA host: their dedicated CPUs are never
given to another claim, and an instance claimed while its domain runs
pinned keeps exactly the CPUs it runs on.

The 2-socket host of ``tests/functional/numa_host.py`` (dedicated CPUs
2-7, 10-15, 18-23, 26-31; each CPU n is a thread sibling of n+16), read by
the real libvirt driver; the domains are created in the libvirt test
driver with a ``<cputune>`` as nova's libvirt driver writes one.
"""

import logging
import uuid

import libvirt
import pytest

from rtagent.rpc.status import node_status
from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from tests.functional.numa_host import read_host
from tests.unit.helpers import make_tracker

pytestmark = pytest.mark.functional

PINNED = {"hw:cpu_policy": "dedicated"}


@pytest.fixture
def pinned_domain():
    """Start domains pinned to given CPUs in the test driver (which every
    connection of this process shares); destroyed after the test."""
    conn = libvirt.open("test:///default")
    started = []

    def start(cpus, name=None):
        uid = str(uuid.uuid4())
        pins = "".join(f"<vcpupin vcpu='{n}' cpuset='{cpu}'/>" for n, cpu in enumerate(cpus))
        xml = (
            f"<domain type='test'><name>{name or uid}</name><uuid>{uid}</uuid>"
            f"<memory>1048576</memory><vcpu>{len(cpus)}</vcpu>"
            f"<cputune>{pins}<emulatorpin cpuset='{','.join(map(str, cpus))}'/></cputune>"
            "<os><type>hvm</type></os></domain>"
        )
        started.append(conn.createXML(xml, 0))
        return uid

    yield start
    for dom in started:
        dom.destroy()
    conn.close()


@pytest.fixture
def tracker(tmp_path):
    tracker, store = make_tracker(tmp_path)
    yield tracker
    store.close()


def claim(tracker, uid, vcpus, **specs):
    return tracker.instance_claim(uid, Flavor(vcpus, 512), extra_specs=specs)


def test_cpus_of_a_domain_without_a_claim_are_never_pinned_again(tracker, pinned_domain, caplog):
    squatter = pinned_domain([2, 18, 3, 19])
    with caplog.at_level(logging.WARNING):
        snap = tracker.update_host(read_host())
    assert dict(snap.numa_unclaimed) == {squatter: (2, 3, 18, 19)}
    assert f"domain {squatter} is pinned to dedicated CPU(s) 2,3,18,19" in caplog.text
    status = node_status(snap, now=0)["numa"]
    assert status["unclaimed_cpus"] == {squatter: [2, 3, 18, 19]}

    # 24 dedicated CPUs, 4 of them the domain's: five 4-vCPU guests fit
    # (two on cell 0's 8 free CPUs, three on cell 1's 12), a sixth does not.
    taken = set()
    for _ in range(5):
        taken |= claim(tracker, str(uuid.uuid4()), 4, **PINNED).numa.pinned
    assert not taken & {2, 3, 18, 19}
    with pytest.raises(errors.ComputeResourcesUnavailable):
        claim(tracker, str(uuid.uuid4()), 4, **PINNED)


def test_a_guest_claimed_while_running_pinned_keeps_its_cpus(tracker, pinned_domain):
    legacy = pinned_domain([5, 21])
    tracker.update_host(read_host())
    placed = claim(tracker, legacy, 2, **PINNED).numa
    assert placed.pinned == {5, 21}
    assert {cpu for _, cpu in placed.fits[0].pinning} == {5, 21}
    # Once claimed, nothing is unclaimed, and the CPUs are its claim's.
    snap = tracker.update_host(read_host())
    assert dict(snap.numa_unclaimed) == {}
    other = claim(tracker, str(uuid.uuid4()), 12, **PINNED).numa
    assert not other.pinned & {5, 21}


def test_a_claim_that_cannot_keep_its_running_cpus_is_refused(tracker, pinned_domain):
    # A guest pinned to CPUs another claim holds already (two guests on one
    # core, left by the past): its claim cannot say where it runs, so it is
    # refused rather than given other CPUs.
    first = str(uuid.uuid4())
    tracker.update_host(read_host())
    held = claim(tracker, first, 2, **PINNED).numa.pinned
    clash = pinned_domain(sorted(held))
    tracker.update_host(read_host())
    pinned_elsewhere = f"the guest runs pinned to CPU\\(s\\) {','.join(map(str, sorted(held)))}"
    with pytest.raises(errors.ComputeResourcesUnavailable, match=pinned_elsewhere):
        claim(tracker, clash, 2, **PINNED)
    assert tracker.snapshot().instances[0].uuid == first  # nothing else changed
    assert len(tracker.snapshot().instances) == 1


def test_a_domain_pinned_to_shared_cpus_only_holds_nothing(tracker, pinned_domain):
    pinned_domain([0, 16])  # CPUs of cpu_shared_set
    snap = tracker.update_host(read_host())
    assert dict(snap.numa_unclaimed) == {}
