"""The audit against a real libvirtd + QEMU with tiny TCG guests."""

import glob
import os
import signal
import threading
import time

import pytest

from rtagent.service.periodic import PeriodicLoop, Trigger
from rtagent.virt import errors, host
from rtagent.virt.libvirt import LibvirtDriver
from rtagent.virt.libvirt.probes import cpu_traits

pytestmark = pytest.mark.integration


def proc_cpuinfo_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def sys_online_cpus():
    with open("/sys/devices/system/cpu/online") as f:
        text = f.read().strip()
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


# Linux /proc/cpuinfo flag -> the trait it must give (names differ).
LINUX_FLAG_TRAITS = {
    "sse": "HW_CPU_X86_SSE",
    "sse2": "HW_CPU_X86_SSE2",
    "mmx": "HW_CPU_X86_MMX",
    "pni": "HW_CPU_X86_SSE3",
    "ssse3": "HW_CPU_X86_SSSE3",
    "sse4_1": "HW_CPU_X86_SSE41",
    "sse4_2": "HW_CPU_X86_SSE42",
    "pclmulqdq": "HW_CPU_X86_CLMUL",
    "aes": "HW_CPU_X86_AESNI",
    "avx": "HW_CPU_X86_AVX",
    "avx2": "HW_CPU_X86_AVX2",
    "bmi1": "HW_CPU_X86_BMI",
    "bmi2": "HW_CPU_X86_BMI2",
    "fma": "HW_CPU_X86_FMA3",
    "f16c": "HW_CPU_X86_F16C",
    "sha_ni": "HW_CPU_X86_SHA",
    "avx512f": "HW_CPU_X86_AVX512F",
    "vaes": "HW_CPU_X86_AVX512VAES",
    "vpclmulqdq": "HW_CPU_X86_AVX512VPCLMULQDQ",
    "abm": "HW_CPU_X86_ABM",
}


@pytest.fixture
def trigger():
    """What the driver's events pull: an early run of a loop given it."""
    return Trigger()


@pytest.fixture
def driver(libvirtd, tmp_path, trigger):
    drv = LibvirtDriver(
        libvirtd.uri, str(tmp_path), events=True, keepalive=(1, 2), on_change=trigger.pull
    )
    yield drv
    drv.close()


def ours(view, libvirtd):
    return sorted(
        (d.name[len(libvirtd.prefix) :], d.state, d.vcpus, d.memory_mb)
        for d in view.domains
        if d.name.startswith(libvirtd.prefix)
    )


def test_audit_matches_the_host(libvirtd, guests, driver, admin):
    view = driver.read_host()
    assert view.hypervisor_type == "QEMU"
    assert view.vcpus == sys_online_cpus()
    # libvirt's NUMA total (getInfo), the figure nova reports; the NUMA cells
    # add up to the same memory.
    assert view.memory_mb == admin.getInfo()[1]
    assert sum(c.memory_mb for c in view.numa_cells) == view.memory_mb
    nodes = glob.glob("/sys/devices/system/node/node[0-9]*")
    assert len(view.numa_cells) == max(1, len(nodes))
    assert frozenset().union(*(c.cpu_ids for c in view.numa_cells)) == frozenset(
        range(sys_online_cpus())
    )
    topo = view.cpu_topology
    assert topo.sockets * topo.dies * topo.cores * topo.threads == view.vcpus
    # Every mapped CPU flag the kernel shows is a trait, and no more.
    flags = proc_cpuinfo_flags()
    expected = {trait for flag, trait in LINUX_FLAG_TRAITS.items() if flag in flags}
    got = {t for t in view.traits if t.startswith("HW_CPU_X86_")}
    assert expected <= got
    missing = {t for flag, t in LINUX_FLAG_TRAITS.items() if flag not in flags}
    assert not (missing & got)
    assert "HW_CPU_X86_SSE3" in got  # libvirt's "pni", which nova misses
    # Capability traits from domain capabilities, each with its reason.
    sources = dict(view.trait_sources)
    assert "COMPUTE_STORAGE_BUS_VIRTIO" in view.traits
    assert "disk bus 'virtio'" in sources["COMPUTE_STORAGE_BUS_VIRTIO"]
    assert "COMPUTE_ARCH_X86_64" in view.traits
    assert "COMPUTE_VOLUME_MULTI_ATTACH" in view.traits
    assert view.traits <= driver.managed_traits | cpu_traits.managed_traits("x86_64")
    assert ("x86_64", "qemu", "hvm") in view.supported_instances
    assert ours(view, libvirtd) == [
        ("g0", host.DOMAIN_RUNNING, 1, 64),
        ("g1", host.DOMAIN_RUNNING, 1, 96),
    ]
    assert view.libvirt_version >= 9_000_000


def test_audit_cost_is_constant_in_domains(libvirtd, guests, driver, admin):
    driver.read_host()
    driver.read_host()
    before = driver.last_call_count
    extra = libvirtd.create_guest(admin, "count")
    try:
        driver.read_host()
        # the new domain's XML (its host devices) is read once, and the
        # domains in full: after the states alone found a new one (+1), or
        # at once when its lifecycle event came first (the event thread's
        # timing)
        assert driver.last_call_count in (before + 1, before + 2)
        time.sleep(1)  # let the guest's lifecycle events arrive
        driver.read_host()  # they may ask for its XML once more
        driver.read_host()
        assert driver.last_call_count == before == 7
    finally:
        libvirtd.destroy_guest(admin, extra)


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_guest_started_and_destroyed_outside_shows_in_next_triggered_audit(
    libvirtd, guests, driver, admin, trigger
):
    views = []
    # An hour's interval: only an event-triggered run can see the changes.
    loop = PeriodicLoop(
        lambda: views.append(driver.read_host()), 3600, debounce=0.2, trigger=trigger
    )
    worker = threading.Thread(target=loop.run, daemon=True)
    worker.start()
    try:
        assert wait_for(lambda: loop.runs >= 1)
        assert all(name != "outside" for name, *_ in ours(views[-1], libvirtd))
        dom = libvirtd.create_guest(admin, "outside")
        assert wait_for(lambda: any(n == "outside" for n, *_ in ours(views[-1], libvirtd)))
        libvirtd.destroy_guest(admin, dom)
        assert wait_for(lambda: all(n != "outside" for n, *_ in ours(views[-1], libvirtd)))
        assert loop.triggered_runs >= 2
        # Debounced: a start sends several events, each start costs few runs.
        assert loop.runs <= 1 + 2 * 3
    finally:
        loop.stop()
        worker.join(5)


def test_libvirtd_restart_is_survived(libvirtd, guests, driver):
    assert len(ours(driver.read_host(), libvirtd)) == 2
    libvirtd.stop_libvirtd()
    try:
        with pytest.raises(errors.HypervisorUnavailable):
            driver.read_host()
        assert not driver.available
        assert driver.unavailable_reason
    finally:
        libvirtd.start_libvirtd()

    def reads():
        try:
            return driver.read_host()
        except errors.HypervisorUnavailable:
            return None

    assert wait_for(lambda: reads() is not None, timeout=30)
    assert driver.available and driver.unavailable_reason is None
    # QEMU kept running; the new daemon found the guests again.
    assert [n for n, *_ in ours(driver.read_host(), libvirtd)] == ["g0", "g1"]
    assert driver.connection_opens >= 2


def test_hung_libvirtd_fails_the_reading_by_keepalive(libvirtd, guests, driver):
    driver.read_host()
    os.kill(libvirtd.libvirtd.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(errors.HypervisorUnavailable):
            driver.read_host()
        # keepalive (1 s, 2 pings): about 3 s, never forever; the bound only
        # catches a hang (10 x).
        assert time.monotonic() - started < 30
        assert not driver.available
    finally:
        os.kill(libvirtd.libvirtd.pid, signal.SIGCONT)

    def reads():
        try:
            return driver.read_host()
        except errors.HypervisorUnavailable:
            return None

    assert wait_for(lambda: reads() is not None, timeout=30)
