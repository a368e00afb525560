# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""CPU feature traits: libvirt feature names -> os-traits ``HW_CPU_*`` traits.

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
  ``amd-no-ssb``, ``ibpb``, ``sgx``); nova's table may lack some of them, so
  a host can carry a few more HW_CPU traits than under nova.

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

FEATURE_TRAITS = {
    "x86_64": X86_FEATURE_TRAITS,
    "i686": X86_FEATURE_TRAITS,
    "aarch64": AARCH64_FEATURE_TRAITS,
}


def cpu_traits(arch, features):
    """Map expanded host CPU features to traits.

    :param arch: host CPU arch (``x86_64``, ``aarch64``, ...).
    :param features: iterable of libvirt feature names.
    :returns: dict ``trait -> the feature that grants it``; empty for an arch
        without a table.
    """
    table = FEATURE_TRAITS.get(arch, {})
    known = _defined()
    return {
        table[f]: f"CPU feature {f!r}" for f in sorted(features) if f in table and table[f] in known
    }


@functools.cache
def managed_traits(arch):
    """Every CPU trait the table could give on ``arch``."""
    return frozenset(t for t in FEATURE_TRAITS.get(arch, {}).values() if t in _defined())


@functools.cache
def _defined():
    return frozenset(os_traits.get_traits("HW_CPU_"))
