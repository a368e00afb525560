"""Probes over canned XML: captured from the real QEMU host here (x86_64) and
hand-written from libvirt's schema (aarch64)."""

import pathlib

import os_traits
import pytest

from rtagent.virt import errors, host
from rtagent.virt.libvirt.probes import (
    capabilities,
    capability_traits,
    cpu_traits,
    cpusets,
    disk,
    numa,
    xmlutil,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "libvirt"


def load(name):
    return xmlutil.parse((FIXTURES / name).read_text(), name)


def test_x86_host_cpu_and_topology():
    cpu = capabilities.host_cpu(load("x86_64-capabilities.xml"))
    assert (cpu.arch, cpu.model, cpu.vendor) == ("x86_64", "kvm64", "AMD")
    assert cpu.topology == host.CpuTopology(sockets=1, cores=2, threads=1, dies=1)
    # Capabilities list only what is beyond the model: no sse2 here.
    assert "pni" not in cpu.features and "sse2" not in cpu.features
    assert cpu.xml.startswith("<cpu>")


def test_x86_numa_single_cell():
    cells = numa.cells(load("x86_64-capabilities.xml"))
    assert len(cells) == 1
    cell = cells[0]
    assert cell.memory_mb == 4548812 // 1024
    assert cell.cpu_ids == {0, 1}
    assert cell.pages == ((4, 1137203), (2048, 0), (1048576, 0))
    assert cell.hugepages == ((2048, 0), (1048576, 0))
    assert cell.distances == ((0, 10),)


def test_aarch64_numa_two_cells_with_hugepages_and_distances():
    root = load("aarch64-capabilities.xml")
    cells = numa.cells(root)
    assert [c.id for c in cells] == [0, 1]
    assert [c.cpu_ids for c in cells] == [frozenset(range(4)), frozenset(range(4, 8))]
    assert cells[0].hugepages == ((2048, 1024),)
    assert cells[1].distances == ((0, 20), (1, 10))
    assert cells[1].cpus[0] == host.NumaCpu(id=4, socket_id=1, core_id=0, siblings={4})
    cpu = capabilities.host_cpu(root)
    assert cpu.topology == host.CpuTopology(sockets=2, cores=4, threads=1)
    traits = cpu_traits.cpu_traits(cpu.arch, cpu.features)
    assert set(traits) == {
        "HW_CPU_AARCH64_" + f.upper()
        for f in ("fp", "asimd", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "cpuid")
    }  # 'ssbs' has no trait in os-traits: left out
    assert capabilities.supported_instances(root) == (
        ("aarch64", "kvm", "hvm"),
        ("aarch64", "qemu", "hvm"),
    )


def test_duplicate_cpu_across_cells_is_an_error():
    xml = (
        "<capabilities><host><cpu><arch>x86_64</arch></cpu><topology><cells num='2'>"
        "<cell id='0'><cpus num='1'><cpu id='0'/></cpus></cell>"
        "<cell id='1'><cpus num='1'><cpu id='0'/></cpus></cell></cells></topology></host>"
        "</capabilities>"
    )
    with pytest.raises(errors.HostReadError, match="CPU 0 in cells 0 and 1"):
        numa.cells(xmlutil.parse(xml, "t"))


def test_expanded_x86_features_give_the_traits_nova_names_differently():
    expanded = load("x86_64-baseline-expanded.xml")
    features = {f.get("name") for f in expanded.findall("feature")}
    traits = cpu_traits.cpu_traits("x86_64", features)
    for feature, trait in [
        ("pni", "HW_CPU_X86_SSE3"),
        ("pclmuldq", "HW_CPU_X86_CLMUL"),
        ("sha-ni", "HW_CPU_X86_SHA"),
        ("bmi1", "HW_CPU_X86_BMI"),
        ("vaes", "HW_CPU_X86_AVX512VAES"),
        ("vpclmulqdq", "HW_CPU_X86_AVX512VPCLMULQDQ"),
        ("sse2", "HW_CPU_X86_SSE2"),
        ("mmx", "HW_CPU_X86_MMX"),
    ]:
        assert traits[trait] == f"CPU feature {feature!r}"


@pytest.mark.parametrize(
    "table", [cpu_traits.X86_FEATURE_TRAITS, cpu_traits.AARCH64_FEATURE_TRAITS]
)
def test_every_table_trait_is_defined_by_os_traits(table):
    defined = set(os_traits.get_traits())
    assert set(table.values()) <= defined


def test_domcaps_traits_from_the_real_host_with_reasons():
    found = capability_traits.domcaps_traits((FIXTURES / "x86_64-domcaps-kvm.xml").read_text())
    assert found["COMPUTE_STORAGE_BUS_VIRTIO"] == "domcaps(kvm, x86_64) disk bus 'virtio'"
    assert "COMPUTE_GRAPHICS_MODEL_QXL" in found
    assert "COMPUTE_ARCH_X86_64" in found
    assert "COMPUTE_STORAGE_VIRTIO_FS" in found
    # No swtpm (backend 'passthrough' only) and no secure loader: none of these.
    for absent in ("COMPUTE_SECURITY_TPM_2_0", "COMPUTE_SECURITY_UEFI_SECURE_BOOT"):
        assert absent not in found
    # ramfb, egl-headless...: no trait in os-traits, not produced.
    assert set(found) <= set(os_traits.get_traits())


def test_domcaps_vtpm_and_secure_boot_when_offered():
    xml = """<domainCapabilities><domain>kvm</domain><arch>x86_64</arch>
      <os supported='yes'><enum name='firmware'><value>efi</value></enum>
        <loader supported='yes'><value>/usr/share/OVMF/OVMF_CODE.secboot.fd</value>
          <enum name='secure'><value>yes</value><value>no</value></enum></loader></os>
      <devices><tpm supported='yes'>
        <enum name='model'><value>tpm-tis</value><value>tpm-crb</value></enum>
        <enum name='backendModel'><value>emulator</value></enum>
        <enum name='backendVersion'><value>1.2</value><value>2.0</value></enum></tpm>
      </devices></domainCapabilities>"""
    found = capability_traits.domcaps_traits(xml)
    assert {
        "COMPUTE_FIRMWARE_UEFI",
        "COMPUTE_SECURITY_UEFI_SECURE_BOOT",
        "COMPUTE_SECURITY_TPM_1_2",
        "COMPUTE_SECURITY_TPM_2_0",
        "COMPUTE_SECURITY_TPM_TIS",
        "COMPUTE_SECURITY_TPM_CRB",
    } <= set(found)


@pytest.mark.parametrize(
    ("version", "igb", "virtio_sound"),
    [(9_000_000, False, False), (9_003_000, True, False), (10_004_000, True, True)],
)
def test_version_gated_tables(version, igb, virtio_sound):
    found = capability_traits.gated_traits(version, "x86_64", "kvm", 8_002_000)
    assert ("COMPUTE_NET_VIF_MODEL_IGB" in found) is igb
    assert ("COMPUTE_SOUND_MODEL_VIRTIO" in found) is virtio_sound
    assert "COMPUTE_NET_VIF_MODEL_VIRTIO" in found


def test_managed_traits_cover_everything_that_can_be_granted():
    managed = capability_traits.managed_traits()
    assert set(capability_traits.driver_traits()) <= managed
    for virt_type in capability_traits.VIF_MODELS:
        granted = capability_traits.gated_traits(99_000_000, "x86_64", virt_type, 99_000_000)
        assert set(granted) <= managed
    found = capability_traits.domcaps_traits((FIXTURES / "x86_64-domcaps-kvm.xml").read_text())
    assert set(found) <= managed


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("0-3", {0, 1, 2, 3}),
        ("0-3,^2", {0, 1, 3}),
        (" 1 , 5-6 ", {1, 5, 6}),
        (None, None),
        ("", None),
    ],
)
def test_parse_cpu_spec(spec, expected):
    got = cpusets.parse_cpu_spec("cpu_shared_set", spec)
    assert got == (frozenset(expected) if expected is not None else None)


@pytest.mark.parametrize("spec", ["a", "3-1", "0-1,^0-1", "-1"])
def test_parse_cpu_spec_errors(spec):
    with pytest.raises(errors.InvalidCPUSet):
        cpusets.parse_cpu_spec("cpu_dedicated_set", spec)


def test_cpu_sets_are_checked_against_the_host():
    online = frozenset({0, 1, 2, 3})
    assert cpusets.check_cpu_sets(frozenset({0, 1}), frozenset({2, 3}), online)
    with pytest.raises(errors.InvalidCPUSet, match="CPUs 4-5 are not online"):
        cpusets.check_cpu_sets(frozenset({0, 4, 5}), None, online)
    with pytest.raises(errors.InvalidCPUSet, match="overlaps cpu_shared_set on CPUs 1"):
        cpusets.check_cpu_sets(frozenset({0, 1}), frozenset({1, 2}), online)


def test_disk_available_least_counts_local_qcow2_growth_only():
    gib = 2**30
    st = type("St", (), {"f_frsize": 4096, "f_bsize": 4096, "f_bavail": 50 * gib // 4096})
    dom = host.DomainInfo(
        "u",
        "n",
        1,
        1,
        64,
        local_disks=(
            ("/inst/u/disk", 20 * gib, 2 * gib),  # qcow2: 18 GiB to grow
            ("/inst/u/raw", 5 * gib, 5 * gib),  # raw: nothing to grow
            ("/dev/sdb", 100 * gib, 0),  # a volume: not ours
        ),
    )
    assert disk.available_least_gb(st, [dom], "/inst") == 50 - 18


def test_remote_managed_ports_is_a_driver_capability_and_managed():
    # Granted on the root only while remote-managed PCI devices are tracked
    # (tests/unit/placement/test_desired_remote_managed.py).
    assert "COMPUTE_REMOTE_MANAGED_PORTS" in capability_traits.managed_traits()
    assert "COMPUTE_REMOTE_MANAGED_PORTS" in capability_traits.driver_traits()


# -- what nova's libvirt driver derives beyond the CPU feature table ----------


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("x86_64", {"HW_ARCH_X86_64"}),
        ("aarch64", {"HW_ARCH_AARCH64"}),
        ("i686", {"HW_ARCH_I686"}),
        ("ppc64le", {"HW_ARCH_PPC64LE"}),
        ("s390x", {"HW_ARCH_S390X"}),
        # nova upper-cases libvirt's name and maps nothing: os-traits has
        # HW_ARCH_ARMV7, not HW_ARCH_ARMV7L, so no trait.
        ("armv7l", set()),
    ],
)
def test_arch_trait_is_libvirts_host_arch_upper_cased(arch, expected):
    found = cpu_traits.arch_traits(arch)
    assert set(found) == expected
    assert all(reason == f"host CPU arch {arch!r}" for reason in found.values())


def caps_with_cells(cells_xml):
    return xmlutil.parse(
        "<capabilities><host><cpu><arch>x86_64</arch></cpu>"
        f"<topology><cells num='2'>{cells_xml}</cells></topology></host></capabilities>",
        "t",
    )


def cell(cell_id, *cpus):
    """``cpus``: ``(id, siblings)``; siblings None leaves the attribute out."""
    body = "".join(
        f"<cpu id='{i}' socket_id='0' core_id='{i}' siblings='{s}'/>"
        if s is not None
        else f"<cpu id='{i}'/>"
        for i, s in cpus
    )
    return f"<cell id='{cell_id}'><cpus num='{len(cpus)}'>{body}</cpus></cell>"


# Named host topologies: (capabilities root, the reason or None for no trait).
HT_HOSTS = {
    # The 'ht' CPU flag is set on this host but no CPU has a sibling: nova
    # reads the sibling sets only, not the flag nor <topology threads>.
    "x86_64 fixture, ht flag, no siblings": (lambda: load("x86_64-capabilities.xml"), None),
    "aarch64 fixture, two cells": (lambda: load("aarch64-capabilities.xml"), None),
    "two threads per core": (
        lambda: caps_with_cells(cell(0, (0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3"))),
        "CPU 0 has siblings 0,2",
    ),
    "SMT in the second cell only": (
        lambda: caps_with_cells(cell(0, (0, "0"), (1, "1")) + cell(1, (2, "2-3"), (3, "2-3"))),
        "CPU 2 has siblings 2,3",
    ),
    "offline CPU without topology": (lambda: caps_with_cells(cell(0, (0, "0"), (1, None))), None),
    "no NUMA topology": (
        lambda: xmlutil.parse(
            "<capabilities><host><cpu><arch>x86_64</arch></cpu></host></capabilities>", "t"
        ),
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(HT_HOSTS))
def test_hyperthreading_from_the_numa_sibling_sets(name):
    root, reason = HT_HOSTS[name][0](), HT_HOSTS[name][1]
    found = cpu_traits.hyperthreading_traits(numa.cells(root))
    expected = {} if reason is None else {"HW_CPU_HYPERTHREADING": reason}
    assert found == expected


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_hyperthreading_and_arch_traits_are_managed(arch):
    # Managed: removed from the provider when the host stops having them,
    # as nova sets HW_CPU_HYPERTHREADING to False.
    managed = cpu_traits.managed_traits(arch)
    assert "HW_CPU_HYPERTHREADING" in managed
    assert {"HW_ARCH_X86_64", "HW_ARCH_AARCH64"} <= managed
    assert set(os_traits.get_traits("HW_ARCH_")) <= managed


@pytest.mark.parametrize(
    ("feature", "traits"),
    [
        # nova's CPU_TRAITS_MAPPING keeps the old generic traits and adds the
        # vendor-specific ones; both are reported.
        ("svm", {"HW_CPU_X86_SVM", "HW_CPU_X86_AMD_SVM"}),
        ("vmx", {"HW_CPU_X86_VMX", "HW_CPU_X86_INTEL_VMX"}),
    ],
)
def test_virtualisation_features_give_the_generic_and_the_vendor_trait(feature, traits):
    found = cpu_traits.cpu_traits("x86_64", {feature})
    assert set(found) == traits
    assert all(reason == f"CPU feature {feature!r}" for reason in found.values())
    assert traits <= cpu_traits.managed_traits("x86_64")


# nova's SUPPORTED_VIF_MODELS (nova/virt/libvirt/vif.py), nova 34.0.0.
NOVA_VIF_MODELS = {
    "qemu": {
        "VIRTIO",
        "NE2K_PCI",
        "PCNET",
        "RTL8139",
        "E1000",
        "E1000E",
        "LAN9118",
        "SPAPR_VLAN",
        "VMXNET3",
        "IGB",
    },
    "kvm": {
        "VIRTIO",
        "NE2K_PCI",
        "PCNET",
        "RTL8139",
        "E1000",
        "E1000E",
        "SPAPR_VLAN",
        "VMXNET3",
        "IGB",
    },
}
NEW = (10_004_000, 8_002_000)  # libvirt, QEMU: every gated row applies


@pytest.mark.parametrize("virt_type", ["kvm", "qemu", "test"])
def test_vif_models_follow_the_domain_type(virt_type):
    found = capability_traits.gated_traits(NEW[0], "x86_64", virt_type, NEW[1])
    vif = {t.removeprefix("COMPUTE_NET_VIF_MODEL_") for t in found if "_VIF_MODEL_" in t}
    assert vif == NOVA_VIF_MODELS.get(virt_type, set())
    # Every model of any domain type is managed: LAN9118 is removed on KVM.
    managed = capability_traits.managed_traits()
    assert {f"COMPUTE_NET_VIF_MODEL_{m}" for m in NOVA_VIF_MODELS["qemu"]} <= managed


@pytest.mark.parametrize(
    ("libvirt_version", "qemu_version", "igb", "virtio_sound"),
    [
        (9_003_000, 7_002_000, False, False),  # nova also needs QEMU 8.0.0 for IGB
        (9_003_000, 8_000_000, True, False),
        (10_004_000, 8_001_000, True, False),  # and QEMU 8.2.0 for virtio sound
        (10_004_000, 8_002_000, True, True),
        (10_003_000, 9_000_000, True, False),
    ],
)
def test_qemu_version_gates_as_nova(libvirt_version, qemu_version, igb, virtio_sound):
    found = capability_traits.gated_traits(libvirt_version, "x86_64", "kvm", qemu_version)
    assert ("COMPUTE_NET_VIF_MODEL_IGB" in found) is igb
    assert ("COMPUTE_SOUND_MODEL_VIRTIO" in found) is virtio_sound


def test_viommu_auto_when_domain_capabilities_list_the_models():
    # libvirt versions whose domain capabilities have <iommu> skip the static
    # vIOMMU table; 'auto' must still come with the models they list.
    xml = """<domainCapabilities><domain>kvm</domain><arch>x86_64</arch>
      <devices><iommu supported='yes'><enum name='model'>
        <value>intel</value><value>virtio</value></enum></iommu></devices>
      </domainCapabilities>"""
    found = capability_traits.domcaps_traits(xml)
    found.update(
        capability_traits.gated_traits(NEW[0], "x86_64", "kvm", NEW[1], has_domcaps_iommu=True)
    )
    viommu = {t for t in found if t.startswith("COMPUTE_VIOMMU_MODEL_")}
    assert viommu == {
        "COMPUTE_VIOMMU_MODEL_INTEL",
        "COMPUTE_VIOMMU_MODEL_VIRTIO",
        "COMPUTE_VIOMMU_MODEL_AUTO",
    }
