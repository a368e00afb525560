# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Capability traits (``COMPUTE_*``), each traced to the fact that grants it.

Three sources, as in nova's libvirt driver:

1. the domain capabilities XML (``getDomainCapabilities`` for the host arch
   and the domain type guests get): storage buses, graphics models,
   firmware and secure boot, vTPM, virtio-fs, vIOMMU models, arch;
2. static tables gated by the daemon's libvirt version (and, where nova
   also asks for one, the QEMU version), for what domain capabilities do
   not list (VIF models per domain type, sound models, packed virtqueues,
   ...);
3. the driver's own capabilities: what nova's libvirt driver declares it can
   do (image types, device tagging, volume multi-attach/extend, trusted
   certs, ...), reported so a Nova scheduler's requests match as before.

Every function returns ``{trait: reason}``; ``reason`` is the libvirt fact
(or the table row) that grants the trait, shown by ``rtagent status`` and
in the docs. Traits os-traits does not define are never produced.
"""

import functools

import os_traits

from rtagent.virt.libvirt.probes import xmlutil


def _v(major, minor, release=0):
    return major * 1_000_000 + minor * 1_000 + release


def _fmt(version):
    return f"{version // 1_000_000}.{version // 1_000 % 1_000}.{version % 1_000}"


# Tables: (trait, minimum libvirt version, arches or None for all).
_KVM_VIF_MODELS = (
    ("COMPUTE_NET_VIF_MODEL_E1000", 0, None),
    ("COMPUTE_NET_VIF_MODEL_E1000E", 0, None),
    ("COMPUTE_NET_VIF_MODEL_NE2K_PCI", 0, None),
    ("COMPUTE_NET_VIF_MODEL_PCNET", 0, None),
    ("COMPUTE_NET_VIF_MODEL_RTL8139", 0, None),
    ("COMPUTE_NET_VIF_MODEL_SPAPR_VLAN", 0, None),
    ("COMPUTE_NET_VIF_MODEL_VIRTIO", 0, None),
    ("COMPUTE_NET_VIF_MODEL_VMXNET3", 0, None),
    ("COMPUTE_NET_VIF_MODEL_IGB", _v(9, 3), None),
)
# nova's SUPPORTED_VIF_MODELS, keyed by its [libvirt] virt_type, for the
# domain types this agent reads domain capabilities for. nova lists LAN9118
# for qemu only. Another domain type gets no VIF model trait (nova: none for
# a type it does not list).
VIF_MODELS = {
    "kvm": _KVM_VIF_MODELS,
    "qemu": (*_KVM_VIF_MODELS, ("COMPUTE_NET_VIF_MODEL_LAN9118", 0, None)),
}
SOUND_MODELS = (
    ("COMPUTE_SOUND_MODEL_AC97", 0, None),
    ("COMPUTE_SOUND_MODEL_ES1370", 0, None),
    ("COMPUTE_SOUND_MODEL_ICH6", 0, None),
    ("COMPUTE_SOUND_MODEL_ICH9", 0, None),
    ("COMPUTE_SOUND_MODEL_PCSPK", 0, ("x86_64", "i686")),
    ("COMPUTE_SOUND_MODEL_SB16", 0, None),
    ("COMPUTE_SOUND_MODEL_USB", 0, None),
    ("COMPUTE_SOUND_MODEL_VIRTIO", _v(10, 4), None),
)
# Used only when domain capabilities have no <iommu> element (libvirt < 9.x).
VIOMMU_MODELS = (
    ("COMPUTE_VIOMMU_MODEL_INTEL", _v(2, 1), ("x86_64", "i686")),
    ("COMPUTE_VIOMMU_MODEL_SMMUV3", _v(5, 5), ("aarch64",)),
    ("COMPUTE_VIOMMU_MODEL_VIRTIO", _v(8, 3), None),
)
OTHER_GATED = (
    ("COMPUTE_NET_VIRTIO_PACKED", _v(6, 3), None),
    ("COMPUTE_SECURITY_STATELESS_FIRMWARE", _v(8, 6), None),
    ("COMPUTE_ADDRESS_SPACE_PASSTHROUGH", _v(8, 7), ("x86_64",)),
    ("COMPUTE_ADDRESS_SPACE_EMULATED", _v(8, 7), ("x86_64",)),
)
# nova also requires the hypervisor (QEMU, ``getVersion()``) to be at least
# this version for these rows.
MIN_QEMU = {
    "COMPUTE_NET_VIF_MODEL_IGB": _v(8, 0),
    "COMPUTE_SOUND_MODEL_VIRTIO": _v(8, 2),
}

# What nova's libvirt driver declares in its ``capabilities`` dict without
# depending on config, mapped through nova's CAPABILITY_TRAITS_MAP.
DRIVER_CAPABILITIES = {
    "COMPUTE_ACCELERATORS": "supports_accelerators",
    "COMPUTE_DEVICE_TAGGING": "supports_device_tagging",
    "COMPUTE_IMAGE_TYPE_AKI": "supports_image_type_aki",
    "COMPUTE_IMAGE_TYPE_AMI": "supports_image_type_ami",
    "COMPUTE_IMAGE_TYPE_ARI": "supports_image_type_ari",
    "COMPUTE_IMAGE_TYPE_ISO": "supports_image_type_iso",
    "COMPUTE_IMAGE_TYPE_QCOW2": "supports_image_type_qcow2",
    "COMPUTE_IMAGE_TYPE_RAW": "supports_image_type_raw",
    "COMPUTE_NET_ATTACH_INTERFACE": "supports_attach_interface",
    "COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG": "supports_tagged_attach_interface",
    "COMPUTE_REMOTE_MANAGED_PORTS": "supports_remote_managed_ports",
    "COMPUTE_RESCUE_BFV": "supports_bfv_rescue",
    "COMPUTE_SOCKET_PCI_NUMA_AFFINITY": "supports_socket_pci_numa_affinity",
    "COMPUTE_TRUSTED_CERTS": "supports_trusted_certs",
    "COMPUTE_VOLUME_ATTACH_WITH_TAG": "supports_tagged_attach_volume",
    "COMPUTE_VOLUME_EXTEND": "supports_extend_volume",
    "COMPUTE_VOLUME_MULTI_ATTACH": "supports_multiattach",
}

# Trait families derived from domain capabilities: every member is managed,
# so one that disappears (e.g. after a QEMU downgrade) is removed.
DOMCAPS_FAMILIES = (
    "COMPUTE_STORAGE_BUS_",
    "COMPUTE_GRAPHICS_MODEL_",
    "COMPUTE_FIRMWARE_",
    "COMPUTE_ARCH_",
    "COMPUTE_VIOMMU_MODEL_",
)
DOMCAPS_SINGLES = (
    "COMPUTE_SECURITY_UEFI_SECURE_BOOT",
    "COMPUTE_SECURITY_TPM_1_2",
    "COMPUTE_SECURITY_TPM_2_0",
    "COMPUTE_SECURITY_TPM_TIS",
    "COMPUTE_SECURITY_TPM_CRB",
    "COMPUTE_STORAGE_VIRTIO_FS",
)


def _enum(root, path, name):
    elem = root.find(f"{path}/enum[@name='{name}']")
    if elem is None:
        return []
    return [(v.text or "").strip() for v in elem.findall("value") if (v.text or "").strip()]


def _supported(root, path):
    elem = root.find(path)
    return elem is not None and elem.get("supported") == "yes"


def _add(found, trait, reason):
    if trait in _defined():
        found.setdefault(trait, reason)


def domcaps_traits(domcaps_xml):  # noqa: PLR0912 - one branch per device family
    """Traits granted by one domain capabilities document.

    :param domcaps_xml: ``conn.getDomainCapabilities(...)``.
    :returns: dict ``trait -> reason``.
    :raises rtagent.virt.errors.HostReadError: the XML does not parse.
    """
    root = xmlutil.parse(domcaps_xml, "domain capabilities")
    where = f"domcaps({root.findtext('domain', '?')}, {root.findtext('arch', '?')})"
    found = {}
    arch = (root.findtext("arch") or "").strip()
    if arch:
        _add(found, f"COMPUTE_ARCH_{arch.upper()}", f"{where} <arch>{arch}</arch>")
    if _supported(root, "devices/disk"):
        for bus in _enum(root, "devices/disk", "bus"):
            _add(found, f"COMPUTE_STORAGE_BUS_{bus.upper()}", f"{where} disk bus {bus!r}")
    if _supported(root, "devices/video"):
        for model in _enum(root, "devices/video", "modelType"):
            _add(found, f"COMPUTE_GRAPHICS_MODEL_{model.upper()}", f"{where} video model {model!r}")
    firmware = _enum(root, "os", "firmware")
    loaders = root.findall("os/loader/value")
    if "bios" in firmware or (arch in ("x86_64", "i686") and _supported(root, "os")):
        # On x86, QEMU boots SeaBIOS when no loader is given.
        _add(found, "COMPUTE_FIRMWARE_BIOS", f"{where} os supported on {arch} (SeaBIOS)")
    if "efi" in firmware or loaders:
        _add(found, "COMPUTE_FIRMWARE_UEFI", f"{where} firmware 'efi' or a UEFI loader")
        if "yes" in _enum(root, "os/loader", "secure"):
            _add(
                found,
                "COMPUTE_SECURITY_UEFI_SECURE_BOOT",
                f"{where} UEFI loader with secure='yes'",
            )
    if _supported(root, "devices/tpm") and "emulator" in _enum(root, "devices/tpm", "backendModel"):
        # Without the emulator backend (swtpm) there is no vTPM to give.
        versions = _enum(root, "devices/tpm", "backendVersion") or ["2.0"]
        for version in versions:
            _add(
                found,
                f"COMPUTE_SECURITY_TPM_{version.replace('.', '_')}",
                f"{where} tpm backend 'emulator' version {version}",
            )
        for model in _enum(root, "devices/tpm", "model"):
            _add(
                found,
                f"COMPUTE_SECURITY_TPM_{model.split('-')[-1].upper()}",
                f"{where} tpm model {model!r} with backend 'emulator'",
            )
    if "virtiofs" in _enum(root, "devices/filesystem", "driverType"):
        _add(found, "COMPUTE_STORAGE_VIRTIO_FS", f"{where} filesystem driver 'virtiofs'")
    if _supported(root, "devices/iommu"):
        for model in _enum(root, "devices/iommu", "model"):
            _add(found, f"COMPUTE_VIOMMU_MODEL_{model.upper()}", f"{where} iommu model {model!r}")
    return found


def gated_traits(libvirt_version, arch, virt_type, qemu_version, has_domcaps_iommu=False):
    """Traits from the version-gated static tables.

    :param libvirt_version: the daemon's ``getLibVersion()``.
    :param arch: host arch.
    :param virt_type: the domain type guests get (``kvm``, ``qemu``); picks
        the VIF model table.
    :param qemu_version: the hypervisor's ``getVersion()``, for the rows in
        :data:`MIN_QEMU`.
    :param has_domcaps_iommu: domain capabilities grant vIOMMU models, so the
        static vIOMMU table is not used (``auto`` is still given here).
    """
    tables = [
        (VIF_MODELS.get(virt_type, ()), f"VIF models for {virt_type}: "),
        (SOUND_MODELS, ""),
        (OTHER_GATED, ""),
    ]
    if not has_domcaps_iommu:
        tables.append((VIOMMU_MODELS, ""))
    found = {}
    for table, label in tables:
        for trait, minimum, arches in table:
            min_qemu = MIN_QEMU.get(trait, 0)
            if libvirt_version < minimum or qemu_version < min_qemu:
                continue
            if arches is not None and arch not in arches:
                continue
            reason = (
                f"libvirt {_fmt(libvirt_version)} >= {_fmt(minimum)}"
                if minimum
                else "static table (every libvirt version)"
            )
            if min_qemu:
                reason += f", QEMU {_fmt(qemu_version)} >= {_fmt(min_qemu)}"
            _add(found, trait, label + reason + (f" on {arch}" if arches else ""))
    viommu = [t for t in found if t.startswith("COMPUTE_VIOMMU_MODEL_")]
    if viommu or has_domcaps_iommu:
        _add(found, "COMPUTE_VIOMMU_MODEL_AUTO", "some vIOMMU model is available")
    return found


def driver_traits():
    """The driver's own capabilities, as nova's libvirt driver declares them.
    COMPUTE_REMOTE_MANAGED_PORTS among them is granted only while the node
    tracks remote-managed PCI devices (:mod:`rtagent.placement.desired`)."""
    found = {}
    for trait, capability in DRIVER_CAPABILITIES.items():
        _add(found, trait, f"driver capability {capability}")
    return found


@functools.cache
def managed_traits():
    """Every capability trait this module could ever grant."""
    defined = _defined()
    names = set(DRIVER_CAPABILITIES) | set(DOMCAPS_SINGLES)
    for table in (*VIF_MODELS.values(), SOUND_MODELS, VIOMMU_MODELS, OTHER_GATED):
        names.update(t for t, _m, _a in table)
    names.add("COMPUTE_VIOMMU_MODEL_AUTO")
    for prefix in DOMCAPS_FAMILIES:
        names.update(t for t in defined if t.startswith(prefix))
    return frozenset(names & defined)


@functools.cache
def _defined():
    return frozenset(os_traits.get_traits("COMPUTE_"))
