"""LibvirtDriver over a hand-written fake connection: call counts, fallbacks, errors.

The fake answers like the real bindings (same method names and return shapes)
and records each call, so the tests can count what a reading costs.
"""

import dataclasses
import os
import pathlib

import libvirt
import pytest

from rtagent.virt import errors, host
from rtagent.virt.libvirt import LibvirtDriver, connection, facts

URI = "qemu:///system"
INFO = ["x86_64", 65536, 8, 2600, 1, 1, 4, 2]
CPU_MAP = (8, [True] * 6 + [False] * 2, 6)
GIB = 2**30
FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "libvirt"
CAPS = (FIXTURES / "x86_64-capabilities.xml").read_text()
DOMCAPS = (FIXTURES / "x86_64-domcaps-kvm.xml").read_text()
EXPANDED = (FIXTURES / "x86_64-baseline-expanded.xml").read_text()
# A reading: getInfo, getCPUMap, getType, getVersion, getHostname,
# getCapabilities, getAllDomainStats, listAllDevices (no node devices here).
# The first after an open adds getLibVersion, getDomainCapabilities and
# baselineCPU.
READING = 8
# A steady reading: the capabilities kept (read once per connection and
# 300 s), the domains' states alone asked.
STEADY = 7
STATIC = 3
STATVFS = os.statvfs_result((4096, 4096, 100 * GIB // 4096, 40 * GIB // 4096, 0, 0, 0, 0, 0, 255))


def lv_error(code, message="boom"):
    exc = libvirt.libvirtError(message)
    # (code, domain, message, level, ...) as virGetLastError returns it.
    exc.err = (code, 0, message, 2, None, None, None, 0, 0)
    return exc


_GROUPS = (
    (libvirt.VIR_DOMAIN_STATS_STATE, "state."),
    (libvirt.VIR_DOMAIN_STATS_VCPU, "vcpu."),
    (libvirt.VIR_DOMAIN_STATS_BALLOON, "balloon."),
    (libvirt.VIR_DOMAIN_STATS_BLOCK, "block."),
)
STATES = libvirt.VIR_DOMAIN_STATS_STATE
FULL = 0
for _bit, _prefix in _GROUPS:
    FULL |= _bit


def full_stats(i):
    return {
        "state.state": 1,
        "vcpu.current": 1 + i % 4,
        "vcpu.maximum": 4,
        "balloon.current": 1048576 * (1 + i % 2),
        "balloon.maximum": 2097152,
    }


class FakeDomain:
    def __init__(self, conn, uuid, name, info=None, error=None):
        self._conn, self._uuid, self._name = conn, uuid, name
        self._info, self._error = info, error

    def UUIDString(self):
        return self._uuid

    def name(self):
        return self._name

    def info(self):
        self._conn.calls.append("info")
        if self._error is not None:
            raise self._error
        return self._info

    def XMLDesc(self, flags):
        self._conn.calls.append("XMLDesc")
        if self._error is not None:
            raise self._error
        return f"<domain><uuid>{self._uuid}</uuid><devices/></domain>"


class FakeConn:
    """Answers like virConnect; ``fail`` maps a method name to an error."""

    def __init__(self, domain_stats=(), fail=None, alive=1):
        self.calls = []
        self.groups = []  # the stats groups of each getAllDomainStats
        self.tick = 0
        self.fail = dict(fail or {})
        self.alive = alive
        self.closed = False
        self.domains = [
            (FakeDomain(self, uuid, name, info, error), stats)
            for uuid, name, stats, info, error in domain_stats
        ]

    def _answer(self, method, value):
        self.calls.append(method)
        if method in self.fail:
            raise self.fail[method]
        return value

    def getInfo(self):
        return self._answer("getInfo", INFO)

    def getCPUMap(self, flags=0):
        return self._answer("getCPUMap", CPU_MAP)

    def getType(self):
        return self._answer("getType", "QEMU")

    def getVersion(self):
        return self._answer("getVersion", 7002022)

    def getHostname(self):
        return self._answer("getHostname", "cmp-1.example.org")

    def getCapabilities(self):
        return self._answer("getCapabilities", CAPS)

    def getLibVersion(self):
        return self._answer("getLibVersion", 9000000)

    def getDomainCapabilities(self, emulator, arch, machine, virttype, flags):
        assert (arch, virttype) == ("x86_64", "kvm")
        return self._answer("getDomainCapabilities", DOMCAPS)

    def baselineCPU(self, cpus, flags):
        assert flags == libvirt.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES
        assert cpus[0].startswith("<cpu")
        return self._answer("baselineCPU", EXPANDED)

    def getAllDomainStats(self, stats, flags):
        assert flags == 0  # every domain, active or not
        self.groups.append(stats)
        # As QEMU: only the groups asked for; a running guest's vCPU time
        # grows between two readings (a counter, not a size).
        self.tick += 1
        asked = tuple(prefix for bit, prefix in _GROUPS if stats & bit)
        answer = []
        for dom, dom_stats in self.domains:
            counted = dict(dom_stats, **{"vcpu.0.time": self.tick})
            answer.append((dom, {k: v for k, v in counted.items() if k.startswith(asked)}))
        return self._answer("getAllDomainStats", answer)

    def listAllDevices(self, flags):
        return self._answer("listAllDevices", [])

    def isAlive(self):
        self.calls.append("isAlive")
        return self.alive

    def close(self):
        self.closed = True
        return 0


class Opener:
    """Hands out prepared connections in order and counts opens."""

    def __init__(self, *conns):
        self.conns = list(conns)
        self.uris = []

    def __call__(self, uri):
        self.uris.append(uri)
        conn = self.conns.pop(0)
        if isinstance(conn, Exception):
            raise conn
        return conn


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_driver(*conns, statvfs=lambda path: STATVFS, clock=None, **kw):
    opener = Opener(*conns)
    driver = LibvirtDriver(
        URI, "/var/lib/nova/instances", statvfs=statvfs, opener=opener, clock=clock, **kw
    )
    return driver, opener


def qemu_domains(n):
    return [
        (f"00000000-0000-4000-8000-{i:012d}", f"vm-{i}", full_stats(i), None, None)
        for i in range(n)
    ]


def test_reads_a_host():
    conn = FakeConn(qemu_domains(2))
    driver, opener = make_driver(conn)
    view = driver.read_host()
    # The capability-derived fields have their own tests (probes, real host).
    view = dataclasses.replace(
        view,
        cpu_topology=None,
        cpu_arch="",
        cpu_model="",
        cpu_vendor="",
        cpu_features=frozenset(),
        numa_cells=(),
        traits=frozenset(),
        trait_sources=(),
        supported_instances=(),
    )
    assert view == host.HostView(
        disk_available_least=0,  # STATVFS has f_bavail 0
        libvirt_version=9000000,
        hypervisor_hostname="cmp-1.example.org",
        hypervisor_type="QEMU",
        hypervisor_version=7002022,
        vcpus=6,
        online_cpus=frozenset(range(6)),
        memory_mb=65536,
        local_gb=100,
        local_gb_used=60,
        domains=(
            host.DomainInfo("00000000-0000-4000-8000-000000000000", "vm-0", 1, 1, 1024),
            host.DomainInfo("00000000-0000-4000-8000-000000000001", "vm-1", 1, 2, 2048),
        ),
    )
    assert opener.uris == [URI]


@pytest.mark.parametrize("n_domains", [0, 1, 10, 500])
def test_call_count_does_not_grow_with_domains_when_stats_are_full(n_domains):
    driver, _ = make_driver(FakeConn(qemu_domains(n_domains)))
    driver.read_host()
    # the open first; each domain's XML once, when it is first seen
    assert driver.last_call_count == 1 + READING + STATIC + n_domains
    driver.read_host()
    assert driver.last_call_count == STEADY


def test_a_steady_reading_asks_libvirt_for_the_domains_states_alone():
    # The other groups make libvirtd ask each running guest's QEMU; a
    # steady host's sizes come from the last full reading.
    conn = FakeConn(qemu_domains(3))
    driver, _ = make_driver(conn, clock=Clock())
    first = driver.read_host().domains
    assert conn.groups == [FULL]
    for _ in range(3):
        assert driver.read_host().domains is first
        assert driver.last_call_count == STEADY
    assert conn.groups == [FULL, STATES, STATES, STATES]


def test_a_state_change_an_event_or_age_reads_the_domains_in_full():
    clock = Clock()
    conn = FakeConn(qemu_domains(2))
    driver, _ = make_driver(conn, clock=clock)
    driver.read_host()
    # A guest shut off: the states differ, its sizes are read again.
    conn.domains[0][1]["state.state"] = 5
    assert driver.read_host().domains[0].state == 5
    assert conn.groups[-2:] == [STATES, FULL]
    assert driver.last_call_count == STEADY + 1
    # A lifecycle event (a domain redefined, same state): in full at once.
    driver._on_lifecycle(None, conn.domains[1][0], 0, 0, None)
    conn.domains[1][1]["balloon.current"] = 3 * 1048576
    assert driver.read_host().domains[1].memory_mb == 3072
    assert conn.groups[-1] == FULL
    # A balloon that changes with no event: seen once the full reading is
    # older than the bound, not before.
    conn.domains[1][1]["balloon.current"] = 4 * 1048576
    clock.now += facts.FULL_READ_MAX_AGE_S - 1
    assert driver.read_host().domains[1].memory_mb == 3072
    clock.now += 1
    assert driver.read_host().domains[1].memory_mb == 4096
    assert conn.groups[-2:] == [STATES, FULL]


def test_falls_back_to_info_only_for_domains_without_stats():
    # As the test driver answers: state only, so one dom.info() per domain.
    state_only = [
        (
            "00000000-0000-4000-8000-00000000000a",
            "a",
            {"state.state": 3},
            [3, 4096, 2048, 2, 0],
            None,
        ),
        (
            "00000000-0000-4000-8000-00000000000b",
            "b",
            {"state.state": 5},
            [5, 1024, 1024, 1, 0],
            None,
        ),
    ]
    conn = FakeConn(state_only + qemu_domains(3))
    driver, _ = make_driver(conn)
    view = driver.read_host()
    assert conn.calls.count("info") == 2
    assert driver.last_call_count == 1 + READING + STATIC + 2 + 5  # + 5 domain XMLs
    by_name = {d.name: d for d in view.domains}
    assert (by_name["a"].state, by_name["a"].vcpus, by_name["a"].memory_mb) == (3, 2, 2)
    assert (by_name["b"].state, by_name["b"].vcpus, by_name["b"].memory_mb) == (5, 1, 1)


def test_domain_gone_between_stats_and_info_is_skipped():
    gone = lv_error(libvirt.VIR_ERR_NO_DOMAIN, "Domain not found")
    vanished = ("00000000-0000-4000-8000-00000000000a", "gone", {"state.state": 1}, None, gone)
    conn = FakeConn([vanished, *qemu_domains(1)])
    driver, _ = make_driver(conn)
    assert [d.name for d in driver.read_host().domains] == ["vm-0"]


@pytest.mark.parametrize(
    "code", [libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_OPERATION_UNSUPPORTED]
)
def test_cpu_map_unsupported_falls_back_to_info(code):
    driver, _ = make_driver(FakeConn(fail={"getCPUMap": lv_error(code)}))
    assert driver.read_host().vcpus == INFO[2]


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("getAllDomainStats", libvirt.VIR_ERR_SYSTEM_ERROR),
        ("getInfo", libvirt.VIR_ERR_NO_CONNECT),
        ("getCPUMap", libvirt.VIR_ERR_INVALID_CONN),
        ("getHostname", libvirt.VIR_ERR_RPC),
    ],
)
def test_connection_errors_drop_the_connection_and_the_next_read_reopens(method, code):
    broken = FakeConn(fail={method: lv_error(code, "Cannot write data: Broken pipe")})
    fresh = FakeConn()
    driver, opener = make_driver(broken, fresh)
    with pytest.raises(errors.HypervisorUnavailable) as info:
        driver.read_host()
    assert "Broken pipe" in str(info.value)
    assert broken.closed
    assert driver.read_host().vcpus == 6
    assert len(opener.uris) == 2
    assert driver.connection_opens == 2


def test_any_error_on_a_dead_connection_is_a_connection_error():
    # After a daemon restart libvirt answers "client socket is closed" with
    # VIR_ERR_INTERNAL_ERROR; only isAlive() tells it is the connection.
    dead = FakeConn(
        fail={"getInfo": lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, "client socket is closed")},
        alive=0,
    )
    driver, _ = make_driver(dead, FakeConn())
    with pytest.raises(errors.HypervisorUnavailable):
        driver.read_host()
    assert dead.closed
    driver.read_host()


def test_other_errors_keep_the_connection():
    conn = FakeConn(fail={"getAllDomainStats": lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, "oops")})
    driver, opener = make_driver(conn)
    with pytest.raises(errors.HostReadError) as info:
        driver.read_host()
    assert "domain stats" in str(info.value)
    assert "oops" in str(info.value)
    assert not conn.closed
    del conn.fail["getAllDomainStats"]
    driver.read_host()
    assert len(opener.uris) == 1


def test_open_failure_is_unavailable_with_libvirts_message():
    refused = lv_error(libvirt.VIR_ERR_SYSTEM_ERROR, "unable to connect: Connection refused")
    clock = Clock()
    driver, _ = make_driver(refused, FakeConn(), clock=clock)
    with pytest.raises(errors.HypervisorUnavailable) as info:
        driver.read_host()
    assert "Connection refused" in str(info.value)
    assert URI in str(info.value)
    assert driver.last_call_count == 1
    assert not driver.available
    assert "Connection refused" in driver.unavailable_reason
    clock.now += 1.0  # the first backoff
    driver.read_host()
    assert driver.available
    assert driver.unavailable_reason is None


def test_connection_is_reused_and_closed():
    conn = FakeConn()
    driver, opener = make_driver(conn)
    for _ in range(3):
        driver.read_host()
    assert len(opener.uris) == 1
    driver.close()
    driver.close()
    assert conn.closed


def test_missing_instances_path_is_reported_before_libvirt_is_touched():
    def statvfs(path):
        raise FileNotFoundError(2, "No such file or directory", path)

    driver, opener = make_driver(FakeConn(), statvfs=statvfs)
    with pytest.raises(errors.HostReadError) as info:
        driver.read_host()
    assert "/var/lib/nova/instances" in str(info.value)
    assert opener.uris == []


def test_invalid_uri_is_refused_at_construction():
    with pytest.raises(errors.InvalidConnectionURI):
        LibvirtDriver("qemu:/system", "/tmp")


@pytest.mark.parametrize(
    ("code", "alive", "expected"),
    [
        (libvirt.VIR_ERR_SYSTEM_ERROR, True, True),
        (libvirt.VIR_ERR_NO_CONNECT, True, True),
        (libvirt.VIR_ERR_INVALID_CONN, True, True),
        (libvirt.VIR_ERR_RPC, True, True),
        (libvirt.VIR_ERR_INTERNAL_ERROR, False, True),
        (libvirt.VIR_ERR_INTERNAL_ERROR, True, False),
        (libvirt.VIR_ERR_NO_DOMAIN, True, False),
        (libvirt.VIR_ERR_NO_SUPPORT, True, False),
    ],
)
def test_is_connection_error(code, alive, expected):
    assert connection.is_connection_error(code, alive) is expected


# -- traits nova's libvirt driver reports, read through the driver -------------

SMT_CAPS = CAPS.replace("siblings='0'", "siblings='0-1'").replace("siblings='1'", "siblings='0-1'")
QEMU_ONLY_CAPS = CAPS.replace("<domain type='kvm'/>", "")
QEMU_DOMCAPS = (FIXTURES / "x86_64-domcaps-qemu.xml").read_text()


class HostConn(FakeConn):
    """A FakeConn with another host: capabilities, versions, domain type."""

    def __init__(self, caps=CAPS, lib_version=9000000, qemu_version=7002022, virt_type="kvm"):
        super().__init__()
        self.caps, self.lib_version, self.qemu_version = caps, lib_version, qemu_version
        self.virt_type = virt_type

    def getCapabilities(self):
        return self._answer("getCapabilities", self.caps)

    def getLibVersion(self):
        return self._answer("getLibVersion", self.lib_version)

    def getVersion(self):
        return self._answer("getVersion", self.qemu_version)

    def getDomainCapabilities(self, emulator, arch, machine, virttype, flags):
        assert (arch, virttype) == ("x86_64", self.virt_type)
        return self._answer("getDomainCapabilities", DOMCAPS if virttype == "kvm" else QEMU_DOMCAPS)


def traits_of(conn):
    driver, _ = make_driver(conn)
    view = driver.read_host()
    return view.traits, dict(view.trait_sources), driver.managed_traits


def test_arch_trait_from_the_host_cpu_arch():
    traits, sources, managed = traits_of(HostConn())
    assert "HW_ARCH_X86_64" in traits
    assert sources["HW_ARCH_X86_64"] == "host CPU arch 'x86_64'"
    assert "HW_ARCH_X86_64" in managed


@pytest.mark.parametrize(("caps", "expected"), [(CAPS, False), (SMT_CAPS, True)])
def test_hyperthreading_trait_from_the_sibling_sets(caps, expected):
    traits, sources, managed = traits_of(HostConn(caps=caps))
    assert ("HW_CPU_HYPERTHREADING" in traits) is expected
    if expected:
        assert sources["HW_CPU_HYPERTHREADING"] == "CPU 0 has siblings 0,1"
    # Managed either way: a host that loses SMT (nosmt) has it removed.
    assert "HW_CPU_HYPERTHREADING" in managed


@pytest.mark.parametrize(
    ("caps", "virt_type", "lan9118"), [(CAPS, "kvm", False), (QEMU_ONLY_CAPS, "qemu", True)]
)
def test_vif_models_follow_the_domain_type(caps, virt_type, lan9118):
    traits, sources, managed = traits_of(HostConn(caps=caps, virt_type=virt_type))
    assert ("COMPUTE_NET_VIF_MODEL_LAN9118" in traits) is lan9118
    assert "COMPUTE_NET_VIF_MODEL_LAN9118" in managed
    assert f"for {virt_type}" in sources["COMPUTE_NET_VIF_MODEL_VIRTIO"]


@pytest.mark.parametrize(("qemu_version", "igb"), [(7002022, False), (8000000, True)])
def test_igb_needs_libvirt_9_3_and_qemu_8_0(qemu_version, igb):
    traits, _, _ = traits_of(HostConn(lib_version=9003000, qemu_version=qemu_version))
    assert ("COMPUTE_NET_VIF_MODEL_IGB" in traits) is igb


@pytest.mark.parametrize(
    ("reserved", "refused"),
    [
        # the canned host has one cell: 1137203 pages of 4 KiB, none larger
        (((0, 4, 1000),), None),
        (((0, 2048, 0),), None),
        (((0, 2048, 1),), "count: 1 is more than cell 0's 0 pages of 2048 KiB"),
        (((1, 4, 1),), "node: 1 is not a NUMA cell of this host (cells: 0)"),
        (((0, 16, 1),), "size: 16 KiB is not a page size of cell 0"),
    ],
)
def test_reserved_huge_pages_are_checked_against_every_readings_cells(reserved, refused):
    driver, _ = make_driver(FakeConn(), FakeConn(), reserved_huge_pages=reserved)
    if refused is None:
        assert driver.read_host().numa_cells[0].id == 0
        return
    for _ in range(2):  # every reading, not only the first
        with pytest.raises(errors.InvalidReservedHugePages) as info:
            driver.read_host()
        assert refused in str(info.value)
