"""LibvirtDriver against libvirt's test driver (real libvirt, no daemon)."""

import os
import pathlib
import socket
import time

import libvirt
import pytest

from rtagent.virt import errors, host
from rtagent.virt.libvirt import LibvirtDriver

pytestmark = pytest.mark.functional

DEMO_XML = pathlib.Path(__file__).resolve().parents[3] / "etc" / "rtagent" / "demo-host.xml"
DEMO_URI = f"test://{DEMO_XML}"
GIB = 2**30

# (uuid, name, state, vcpus, memory MiB), as written in demo-host.xml.
DEMO_DOMAINS = [
    ("1a6e0c3e-0000-4000-8000-000000000001", "web-1", host.DOMAIN_RUNNING, 2, 2048),
    ("1a6e0c3e-0000-4000-8000-000000000002", "db-1", host.DOMAIN_RUNNING, 4, 4096),
    ("1a6e0c3e-0000-4000-8000-000000000003", "batch-1", host.DOMAIN_PAUSED, 1, 1024),
    ("1a6e0c3e-0000-4000-8000-000000000004", "old-1", host.DOMAIN_SHUTOFF, 2, 512),
]
# The test driver answers getCPUMap with the same fixed map for every host:
# 8 CPUs of which 0, 2 and 4 are online. It ignores the <cpu> element, which
# only feeds getInfo (16 CPUs for the demo host).
TEST_DRIVER_ONLINE_CPUS = 3


def fixed_statvfs(path):
    # 200 GiB, 150 GiB free.
    return os.statvfs_result(
        (4096, 4096, 200 * GIB // 4096, 150 * GIB // 4096, 150 * GIB // 4096, 0, 0, 0, 0, 255)
    )


@pytest.fixture
def demo(tmp_path):
    driver = LibvirtDriver(DEMO_URI, str(tmp_path), statvfs=fixed_statvfs)
    yield driver
    driver.close()


def short(name):
    return name.split(".")[0]


def test_demo_host(demo):
    view = demo.read_host()
    assert view.vcpus == TEST_DRIVER_ONLINE_CPUS
    assert view.memory_mb == 32 * 1024
    assert (view.local_gb, view.local_gb_used) == (200, 50)
    assert (view.hypervisor_type, view.hypervisor_version) == ("TEST", 2)
    # The test driver reports the machine's own hostname.
    assert short(view.hypervisor_hostname) == short(socket.gethostname())
    got = [(d.uuid, d.name, d.state, d.vcpus, d.memory_mb) for d in view.domains]
    assert got == DEMO_DOMAINS
    assert [d.state_name for d in view.domains] == ["running", "running", "paused", "shutoff"]


def test_demo_host_getinfo_reports_the_cpu_element():
    # What the XML says, as a cross-check that the file is the one loaded.
    conn = libvirt.openReadOnly(DEMO_URI)
    try:
        assert conn.getInfo() == ["x86_64", 32768, 16, 2400, 1, 2, 4, 2]
        assert conn.getCPUMap() == (8, [True, False, True, False, True, False, False, False], 3)
    finally:
        conn.close()


def test_connection_is_reused_and_calls_are_counted(demo):
    demo.read_host()
    # Open + 8 calls (listAllDevices among them: the demo host has no PCI
    # devices) + one dom.info() per domain (the test driver's stats
    # carry only the state) + once per connection: getLibVersion and
    # getDomainCapabilities (unsupported here, so isAlive is asked too;
    # no baselineCPU, the test host's CPU has no model).
    # The domain XML (host devices) is read once per domain too.
    assert demo.last_call_count == 1 + 8 + 2 * len(DEMO_DOMAINS) + 3
    for _ in range(3):
        demo.read_host()
    # dom.info() answers are kept while a domain's state is unchanged; the
    # capabilities are kept, the domains' states alone asked.
    assert demo.last_call_count == 7
    assert demo.connection_opens == 1


def test_close_then_read_reopens(demo):
    demo.read_host()
    demo.close()
    demo.close()
    assert len(demo.read_host().domains) == 4
    assert demo.connection_opens == 2


def test_default_test_host(tmp_path):
    driver = LibvirtDriver("test:///default", str(tmp_path), statvfs=fixed_statvfs)
    try:
        view = driver.read_host()
    finally:
        driver.close()
    assert view.vcpus == TEST_DRIVER_ONLINE_CPUS
    assert view.memory_mb == 3072
    assert view.hypervisor_type == "TEST"
    assert view.domains == (
        host.DomainInfo(
            uuid="6695eb01-f6a4-8304-79aa-97f2502e193f",
            name="test",
            state=host.DOMAIN_RUNNING,
            vcpus=2,
            memory_mb=2048,
        ),
    )


def test_unreachable_hypervisor_fails_fast_then_a_good_uri_works(tmp_path):
    bad = LibvirtDriver("qemu+tcp://127.0.0.1:1/system", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(errors.HypervisorUnavailable) as info:
        bad.read_host()
    # A hang guard (refused at once: 0.5 ms measured, a 2 s bound), not a
    # speed check: no retry loop or connect timeout stands between.
    assert time.monotonic() - start < 2
    assert "Connection refused" in str(info.value)
    assert "qemu+tcp://127.0.0.1:1/system" in str(info.value)
    # Still unavailable, and still an error, on the next audit.
    with pytest.raises(errors.HypervisorUnavailable):
        bad.read_host()
    bad.close()

    good = LibvirtDriver(DEMO_URI, str(tmp_path))
    try:
        assert len(good.read_host().domains) == 4
    finally:
        good.close()


def test_connection_broken_under_the_driver_is_reopened(tmp_path):
    opened = []

    def opener(uri):
        conn = libvirt.openReadOnly(uri)
        opened.append(conn)
        return conn

    driver = LibvirtDriver(DEMO_URI, str(tmp_path), statvfs=fixed_statvfs, opener=opener)
    try:
        driver.read_host()
        opened[0].close()  # as if libvirtd went away: VIR_ERR_INVALID_CONN
        with pytest.raises(errors.HypervisorUnavailable):
            driver.read_host()
        assert driver.read_host().memory_mb == 32768
        assert len(opened) == 2
    finally:
        driver.close()


def test_real_statvfs_of_instances_path(tmp_path):
    driver = LibvirtDriver(DEMO_URI, str(tmp_path))
    try:
        view = driver.read_host()
    finally:
        driver.close()
    st = os.statvfs(tmp_path)
    assert view.local_gb == st.f_frsize * st.f_blocks // GIB
    assert view.local_gb_used >= 0


def test_missing_instances_path(tmp_path):
    missing = tmp_path / "not-there"
    driver = LibvirtDriver(DEMO_URI, str(missing))
    try:
        with pytest.raises(errors.HostReadError) as info:
            driver.read_host()
    finally:
        driver.close()
    assert str(missing) in str(info.value)
    assert info.value.code == "virt.host_read_error"


def test_each_connection_to_a_file_host_has_private_state(tmp_path):
    # Defining a domain on one connection does not show up on another, so
    # tests using demo-host.xml cannot disturb each other.
    conn = libvirt.open(DEMO_URI)
    try:
        conn.defineXML(
            "<domain type='test'><name>extra</name><memory>1024</memory>"
            "<os><type>hvm</type></os></domain>"
        )
        driver = LibvirtDriver(DEMO_URI, str(tmp_path), statvfs=fixed_statvfs)
        try:
            assert "extra" not in {d.name for d in driver.read_host().domains}
        finally:
            driver.close()
    finally:
        conn.close()


@pytest.mark.parametrize("uri", ["test:///default", DEMO_URI])
def test_test_driver_host_gets_its_arch_trait_and_no_hyperthreading(tmp_path, uri):
    # Both test hosts report <host><cpu><arch>i686</arch>; the default one has
    # two NUMA cells of CPUs without siblings, the demo file none. No domain
    # capabilities here, so no COMPUTE_* traits.
    driver = LibvirtDriver(uri, str(tmp_path), statvfs=fixed_statvfs)
    try:
        view = driver.read_host()
    finally:
        driver.close()
    assert view.cpu_arch == "i686"
    assert view.traits == {"HW_ARCH_I686"}
    assert dict(view.trait_sources) == {"HW_ARCH_I686": "host CPU arch 'i686'"}
    assert {"HW_ARCH_I686", "HW_CPU_HYPERTHREADING"} <= driver.managed_traits


def test_a_domain_gone_and_defined_again_is_read_anew(tmp_path):
    # The driver keeps per-domain answers between readings (dom.info() for
    # the test driver, the XML's devices and pins); a domain a reading does
    # not find must leave them, or the same UUID defined again with the
    # same state would be read with the old domain's vCPUs.
    opened = []

    def opener(uri):
        opened.append(libvirt.open(uri))
        return opened[-1]

    driver = LibvirtDriver(DEMO_URI, str(tmp_path), statvfs=fixed_statvfs, opener=opener)
    uuid = "1a6e0c3e-0000-4000-8000-000000000004"  # old-1: shut off, 2 vCPUs
    try:
        assert {d.uuid: d.vcpus for d in driver.read_host().domains}[uuid] == 2
        conn = opened[0]
        conn.lookupByUUIDString(uuid).undefine()
        assert uuid not in {d.uuid for d in driver.read_host().domains}
        conn.defineXML(
            f"<domain type='test'><name>old-1</name><uuid>{uuid}</uuid>"
            "<memory>524288</memory><vcpu>6</vcpu><os><type>hvm</type></os></domain>"
        )
        assert {d.uuid: d.vcpus for d in driver.read_host().domains}[uuid] == 6
        assert len(opened) == 1
    finally:
        driver.close()


def test_a_steady_reading_reads_no_domain_again(demo, monkeypatch):
    # Nothing changed: the facts' records of the last reading are reused
    # whole (compared as lists, no per-domain pass), and so is the domain
    # tuple built from them.
    from rtagent.virt.libvirt import facts

    first = demo.read_host().domains
    passes = []
    per_domain = facts._domain_records

    def counted(*args, **kwargs):
        passes.append(1)
        return per_domain(*args, **kwargs)

    monkeypatch.setattr(facts, "_domain_records", counted)
    assert demo.read_host().domains is first
    assert passes == []
    # A domain paused is a change in its stats: read again (a file host is
    # private to its connection: paused through the driver's own).
    demo._connection.get().lookupByUUIDString(DEMO_DOMAINS[0][0]).suspend()
    states = {d.uuid: d.state for d in demo.read_host().domains}
    assert passes == [1]
    assert states[DEMO_DOMAINS[0][0]] == host.DOMAIN_PAUSED


def test_a_domain_redefined_with_the_same_stats_is_read_anew(tmp_path):
    # A shut-off domain defined again with other vCPUs keeps its name, UUID
    # and stats (the test driver's are its state alone): only its lifecycle
    # event tells the driver, which must then read it again rather than
    # reuse the last reading's records.
    uuid = "5e7c1b2a-0000-4000-8000-0000000000aa"

    def xml(vcpus):
        return (
            f"<domain type='test'><name>redefined-1</name><uuid>{uuid}</uuid>"
            f"<memory>524288</memory><vcpu>{vcpus}</vcpu><os><type>hvm</type></os></domain>"
        )

    driver = LibvirtDriver("test:///default", str(tmp_path), statvfs=fixed_statvfs, events=True)
    other = libvirt.open("test:///default")  # shared state: same driver
    dom = None
    try:
        driver.read_host()
        dom = other.defineXML(xml(2))
        assert {d.uuid: d.vcpus for d in driver.read_host().domains}[uuid] == 2
        assert {d.uuid: d.vcpus for d in driver.read_host().domains}[uuid] == 2
        before = driver.events_received
        other.defineXML(xml(6))
        deadline = time.monotonic() + 10
        while driver.events_received <= before:
            assert time.monotonic() < deadline, "no lifecycle event from the test driver"
            time.sleep(0.02)
        assert {d.uuid: d.vcpus for d in driver.read_host().domains}[uuid] == 6
    finally:
        if dom is not None:
            other.lookupByUUIDString(uuid).undefine()
        other.close()
        driver.close()
