"""Domains probe over canned getAllDomainStats results."""

import pytest

from rtagent.virt import errors, host
from rtagent.virt.libvirt.probes import domains

# What a real QEMU daemon (libvirt 9.0, QEMU 7.2) returned for
# STATE | VCPU | BALLOON, trimmed of most vcpu.0.* counters: a running guest
# (96 MiB, 1 of 2 vCPUs, no balloon driver in the guest yet, so it holds all
# of its memory) and a shut-off one (3 vCPUs, currentMemory 64 of 96 MiB).
QEMU_RUNNING = {
    "state.state": 1,
    "state.reason": 1,
    "vcpu.current": 1,
    "vcpu.maximum": 2,
    "vcpu.0.state": 1,
    "vcpu.0.time": 980000000,
    "vcpu.0.wait": 0,
    "vcpu.0.delay": 28416880,
    "balloon.current": 98304,
    "balloon.maximum": 98304,
    "balloon.last-update": 0,
    "balloon.rss": 36664,
}
QEMU_SHUTOFF = {
    "state.state": 5,
    "state.reason": 0,
    "vcpu.current": 3,
    "vcpu.maximum": 3,
    "balloon.current": 65536,
    "balloon.maximum": 98304,
}
# What the libvirt test driver returns for the same request.
TEST_DRIVER = {"state.state": 3, "state.reason": 0}
# dom.info(): [state, max memory KiB, memory KiB, vcpus, cpu time ns].
TEST_DRIVER_INFO = [3, 1048576, 1048576, 1, 1795311793778569000]

UUID_A = "2b000000-0000-4000-8000-000000000001"
UUID_B = "2b000000-0000-4000-8000-000000000002"
UUID_C = "1a6e0c3e-0000-4000-8000-000000000003"


@pytest.mark.parametrize(
    ("stats", "needs"),
    [
        (QEMU_RUNNING, False),
        (QEMU_SHUTOFF, False),
        (TEST_DRIVER, True),
        ({"state.state": 1, "vcpu.current": 1, "balloon.maximum": 1024}, False),
        ({"state.state": 1, "vcpu.current": 1}, True),
        ({"state.state": 1, "balloon.current": 1024}, True),
        ({"vcpu.current": 1, "balloon.current": 1024}, True),
        ({}, True),
    ],
)
def test_needs_info(stats, needs):
    assert domains.needs_info(stats) is needs


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (
            (UUID_A, "tiny-run", QEMU_RUNNING, None),
            host.DomainInfo(UUID_A, "tiny-run", host.DOMAIN_RUNNING, 1, 96),
        ),
        (
            (UUID_B, "tiny-off", QEMU_SHUTOFF, None),
            host.DomainInfo(UUID_B, "tiny-off", host.DOMAIN_SHUTOFF, 3, 64),
        ),
        (
            (UUID_C, "batch-1", TEST_DRIVER, TEST_DRIVER_INFO),
            host.DomainInfo(UUID_C, "batch-1", host.DOMAIN_PAUSED, 1, 1024),
        ),
        # Only the balloon maximum: it is the memory.
        (
            (UUID_A, "a", {"state.state": 1, "vcpu.current": 2, "balloon.maximum": 2097152}, None),
            host.DomainInfo(UUID_A, "a", host.DOMAIN_RUNNING, 2, 2048),
        ),
        # Stats win over info where both have a value.
        (
            (UUID_A, "a", {"state.state": 1}, [5, 4096, 2048, 8, 0]),
            host.DomainInfo(UUID_A, "a", host.DOMAIN_RUNNING, 8, 2),
        ),
        # KiB round up to MiB: usage is never under-counted.
        (
            (UUID_A, "a", {"state.state": 1, "vcpu.current": 1, "balloon.current": 1025}, None),
            host.DomainInfo(UUID_A, "a", host.DOMAIN_RUNNING, 1, 2),
        ),
    ],
)
def test_domain(record, expected):
    assert domains.domain(*record) == expected


@pytest.mark.parametrize(
    "record",
    [
        (UUID_A, "a", TEST_DRIVER, None),
        (UUID_A, "a", {}, None),
        (UUID_A, "a", TEST_DRIVER, [1, 2]),
    ],
)
def test_missing_values_raise(record):
    with pytest.raises(errors.HostReadError) as info:
        domains.domain(*record)
    assert UUID_A in str(info.value)


def test_domains_sorted_by_uuid():
    records = [
        (UUID_B, "tiny-off", QEMU_SHUTOFF, None),
        (UUID_C, "batch-1", TEST_DRIVER, TEST_DRIVER_INFO),
        (UUID_A, "tiny-run", QEMU_RUNNING, None),
    ]
    got = domains.domains(records)
    assert isinstance(got, tuple)
    assert [d.uuid for d in got] == [UUID_C, UUID_A, UUID_B]


def test_no_domains():
    assert domains.domains([]) == ()
