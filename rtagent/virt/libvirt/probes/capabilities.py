# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Capabilities probe: host CPU identity and topology, supported instances.

Input is ``conn.getCapabilities()`` XML (the ``<host><cpu>`` and ``<guest>``
elements); NUMA cells are :mod:`.numa`'s job.
"""

import dataclasses
import xml.etree.ElementTree as ET

from rtagent.virt import errors, host
from rtagent.virt.libvirt.probes import xmlutil

WHAT = "host capabilities"


@dataclasses.dataclass(frozen=True)
class HostCpu:
    """The ``<host><cpu>`` element: arch, model, vendor, topology, features."""

    arch: str
    model: str
    vendor: str
    topology: object  # host.CpuTopology or None
    features: frozenset
    xml: str  # the element itself, for baselineCPU


def host_cpu(root):
    """Read the host CPU from parsed capabilities.

    :param root: ``xmlutil.parse(conn.getCapabilities(), ...)``.
    :returns: a :class:`HostCpu`.
    :raises rtagent.virt.errors.HostReadError: no ``<host><cpu><arch>``.
    """
    cpu = root.find("host/cpu")
    arch = cpu.findtext("arch") if cpu is not None else None
    if not arch:
        raise errors.HostReadError(what=WHAT, reason="no <host><cpu><arch>")
    topo = cpu.find("topology")
    topology = None
    if topo is not None:
        topology = host.CpuTopology(
            sockets=xmlutil.int_attr(topo, "sockets", WHAT),
            cores=xmlutil.int_attr(topo, "cores", WHAT),
            threads=xmlutil.int_attr(topo, "threads", WHAT),
            dies=xmlutil.int_attr(topo, "dies", WHAT, default=1),
        )
    return HostCpu(
        arch=arch.strip(),
        model=(cpu.findtext("model") or "").strip(),
        vendor=(cpu.findtext("vendor") or "").strip(),
        topology=topology,
        features=frozenset(f.get("name") for f in cpu.findall("feature") if f.get("name")),
        xml=ET.tostring(cpu, encoding="unicode"),
    )


def supported_instances(root):
    """``((arch, hypervisor type, vm mode), ...)`` from the ``<guest>`` elements.

    As nova reports them: one tuple per (guest arch, domain type); vm mode is
    the guest's ``os_type`` (``hvm`` for QEMU/KVM).
    """
    found = set()
    for guest in root.findall("guest"):
        mode = (guest.findtext("os_type") or "").strip()
        arch = guest.find("arch")
        if arch is None or not mode or not arch.get("name"):
            continue
        for dom in arch.findall("domain"):
            if dom.get("type"):
                found.add((arch.get("name"), dom.get("type"), mode))
    return tuple(sorted(found))


def virt_type(instances, arch):
    """The domain type guests get on ``arch``: ``kvm`` when offered, else ``qemu``.

    nova takes it from ``[libvirt] virt_type`` (default kvm); this agent has no
    such option and picks what the host can run, preferring hardware
    acceleration. Returns None if ``arch`` has no guest support.
    """
    types = {t for a, t, _mode in instances if a == arch}
    for preferred in ("kvm", "qemu"):
        if preferred in types:
            return preferred
    return sorted(types)[0] if types else None
