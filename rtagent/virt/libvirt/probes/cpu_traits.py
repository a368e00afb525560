# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""CPU traits: feature traits, ``HW_CPU_HYPERTHREADING`` and ``HW_ARCH_*``.

The features come from the host CPU *expanded* by
``baselineCPU(..., VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES)``: capabilities
list only the features beyond the named model (``kvm64`` here), so without
the expansion SSE, SSE2, MMX and friends would be missing.

The table maps libvirt's names (``src/cpu_map/x86_features.xml``), which
differ from trait names in places. Differences from nova 34.0.0's
``CPU_TRAITS_MAPPING``:

- ``pni`` -> HW_CPU_X86_SSE3. libvirt calls SSE3 ``pni`` (the Linux name);
  nova maps only ``sse3``, which libvirt never reports, so nova misses SSE3.
- The table also maps the features os-traits has traits for beyond the
  SIMD and crypto families (``amx-*``, ``pdpe1gb``, ``pcid``, ``md-clear``,
  ``spec-ctrl``, ``ssbd``, ``stibp``, ``amd-ssbd``, ``virt-ssbd``,
  ``amd-no-ssb``, ``ibpb``, ``sgx``); nova's table has the ``amx-*`` ones
  only, so a host can carry a few more HW_CPU traits than under nova.

As in nova's table, ``svm`` and ``vmx`` give both the generic trait and the
vendor one (``HW_CPU_X86_AMD_SVM``, ``HW_CPU_X86_INTEL_VMX``).

Beyond the features, as nova's libvirt driver (``_get_cpu_traits``):
``HW_CPU_HYPERTHREADING`` when some CPU in the NUMA topology has a sibling,
and ``HW_ARCH_<arch>`` for the host CPU arch.

Only traits os-traits defines are ever produced (a unit test checks the
table against the installed os-traits).
"""

import functools

import os_traits

X86_FEATURE_TRAITS = {
    "3dnow": "HW_CPU_X86_3DNOW",
    "abm": "HW_CPU_X86_ABM",
    "aes": "HW_CPU_X86_AESNI",
    "amd-no-ssb": "HW_CPU_X86_AMD_NO_SSB",
    "amd-ssbd": "HW_CPU_X86_AMD_SSBD",
    "amx-bf16": "HW_CPU_X86_AMXBF16",
    "amx-int8": "HW_CPU_X86_AMXINT8",
    "amx-tile": "HW_CPU_X86_AMXTILE",
    "avx": "HW_CPU_X86_AVX",
    "avx2": "HW_CPU_X86_AVX2",
    "avx512bitalg": "HW_CPU_X86_AVX512BITALG",
    "avx512bw": "HW_CPU_X86_AVX512BW",
    "avx512cd": "HW_CPU_X86_AVX512CD",
    "avx512dq": "HW_CPU_X86_AVX512DQ",
    "avx512er": "HW_CPU_X86_AVX512ER",
    "avx512f": "HW_CPU_X86_AVX512F",
    "avx512ifma": "HW_CPU_X86_AVX512IFMA",
    "avx512pf": "HW_CPU_X86_AVX512PF",
    "avx512vbmi": "HW_CPU_X86_AVX512VBMI",
    "avx512vbmi2": "HW_CPU_X86_AVX512VBMI2",
    "avx512vl": "HW_CPU_X86_AVX512VL",
    "avx512vnni": "HW_CPU_X86_AVX512VNNI",
    "avx512-vpopcntdq": "HW_CPU_X86_AVX512VPOPCNTDQ",
    "bmi1": "HW_CPU_X86_BMI",
    "bmi2": "HW_CPU_X86_BMI2",
    "f16c": "HW_CPU_X86_F16C",
    "fma": "HW_CPU_X86_FMA3",
    "fma4": "HW_CPU_X86_FMA4",
    "gfni": "HW_CPU_X86_AVX512GFNI",
    "ibpb": "HW_CPU_X86_AMD_IBPB",
    "md-clear": "HW_CPU_X86_INTEL_MD_CLEAR",
    "mmx": "HW_CPU_X86_MMX",
    "mpx": "HW_CPU_X86_MPX",
    "pcid": "HW_CPU_X86_INTEL_PCID",
    "pclmuldq": "HW_CPU_X86_CLMUL",
    "pdpe1gb": "HW_CPU_X86_PDPE1GB",
    "pni": "HW_CPU_X86_SSE3",
    "sgx": "HW_CPU_X86_SGX",
    "sha-ni": "HW_CPU_X86_SHA",
    "spec-ctrl": "HW_CPU_X86_INTEL_SPEC_CTRL",
    "ssbd": "HW_CPU_X86_INTEL_SSBD",
    "sse": "HW_CPU_X86_SSE",
    "sse2": "HW_CPU_X86_SSE2",
    "sse4.1": "HW_CPU_X86_SSE41",
    "sse4.2": "HW_CPU_X86_SSE42",
    "sse4a": "HW_CPU_X86_SSE4A",
    "ssse3": "HW_CPU_X86_SSSE3",
    "stibp": "HW_CPU_X86_STIBP",
    "svm": "HW_CPU_X86_SVM",
    "tbm": "HW_CPU_X86_TBM",
    "vaes": "HW_CPU_X86_AVX512VAES",
    "virt-ssbd": "HW_CPU_X86_AMD_VIRT_SSBD",
    "vmx": "HW_CPU_X86_VMX",
    "vpclmulqdq": "HW_CPU_X86_AVX512VPCLMULQDQ",
    "xop": "HW_CPU_X86_XOP",
}

# libvirt reports aarch64 host CPU features with the Linux hwcap names
# (/proc/cpuinfo "Features"); os-traits names them alike.
AARCH64_FEATURE_TRAITS = {
    name: f"HW_CPU_AARCH64_{name.upper()}"
    for name in (
        "aes asimd asimddp asimdhp asimdrdm atomics cpuid crc32 dcpop evtstrm fcma fp "
        "fphp jscvt lrcpc pmull sha1 sha2 sha3 sha512 sm3 sm4 sve"
    ).split()
}

# nova kept the generic trait when it added the vendor-specific one; a flavor
# may ask for either.
X86_ALSO = {
    "svm": "HW_CPU_X86_AMD_SVM",
    "vmx": "HW_CPU_X86_INTEL_VMX",
}

FEATURE_TRAITS = {
    "x86_64": X86_FEATURE_TRAITS,
    "i686": X86_FEATURE_TRAITS,
    "aarch64": AARCH64_FEATURE_TRAITS,
}
ALSO_TRAITS = {"x86_64": X86_ALSO, "i686": X86_ALSO}

HYPERTHREADING = "HW_CPU_HYPERTHREADING"


def cpu_traits(arch, features):
    """Map expanded host CPU features to traits.

    :param arch: host CPU arch (``x86_64``, ``aarch64``, ...).
    :param features: iterable of libvirt feature names.
    :returns: dict ``trait -> the feature that grants it``; empty for an arch
        without a table.
    """
    known = _defined()
    found = {}
    for table in (FEATURE_TRAITS.get(arch, {}), ALSO_TRAITS.get(arch, {})):
        for f in sorted(features):
            if f in table and table[f] in known:
                found.setdefault(table[f], f"CPU feature {f!r}")
    return found


def arch_traits(arch):
    """The ``HW_ARCH_*`` trait of the host CPU arch.

    As nova names it: libvirt's ``<host><cpu><arch>`` upper-cased, with no
    other mapping, so an arch os-traits spells differently (libvirt's
    ``armv7l``; os-traits has ``HW_ARCH_ARMV7``) gives no trait.

    :param arch: host CPU arch as libvirt reports it.
    :returns: dict ``trait -> reason``, empty or with one trait.
    """
    trait = f"HW_ARCH_{arch.upper()}"
    return {trait: f"host CPU arch {arch!r}"} if trait in _arch_defined() else {}


def hyperthreading_traits(cells):
    """``HW_CPU_HYPERTHREADING`` when some CPU of the host has a sibling.

    As nova: from the sibling sets of the capabilities' NUMA topology, not
    the ``ht`` CPU flag (the captured x86 host has it and no SMT) nor
    ``<topology threads>`` (libvirt does not guarantee it).

    :param cells: :class:`rtagent.virt.host.NumaCell` tuple (:func:`.numa.cells`).
    :returns: dict ``trait -> reason``, empty without SMT or NUMA topology.
    """
    for cell in cells:
        for cpu in cell.cpus:
            if len(cpu.siblings) > 1:
                siblings = ",".join(str(i) for i in sorted(cpu.siblings))
                return {HYPERTHREADING: f"CPU {cpu.id} has siblings {siblings}"}
    return {}


@functools.cache
def managed_traits(arch):
    """Every CPU trait this module could give on ``arch``, plus every
    ``HW_ARCH_*``: a host has one arch, any other arch trait is wrong."""
    tables = (FEATURE_TRAITS.get(arch, {}), ALSO_TRAITS.get(arch, {}))
    names = {t for table in tables for t in table.values()} | {HYPERTHREADING}
    return frozenset(names & _defined()) | _arch_defined()


@functools.cache
def _defined():
    return frozenset(os_traits.get_traits("HW_CPU_"))


@functools.cache
def _arch_defined():
    return frozenset(os_traits.get_traits("HW_ARCH_"))
