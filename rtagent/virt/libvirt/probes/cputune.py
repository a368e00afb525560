# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""CPU tune probe: the host CPUs a domain's vCPUs and emulator threads are
pinned to.

Read from the domain XML (``<cputune>``) that the host devices probe reads
already, once per new domain. A guest that was running before its claim
(one nova pinned, then claimed by the agent on a host moved to it) keeps
these CPUs whatever a claim chooses, so the tracker must know them.
"""

from rtagent import cpuspec
from rtagent.virt import errors
from rtagent.virt.libvirt.probes import xmlutil


def pinned_cpus(domain_xml):
    """Every host CPU named by the domain's ``<vcpupin>`` and
    ``<emulatorpin>`` elements: empty for a domain that pins nothing.

    A floating guest's ``cpuset`` (the whole shared set) is included too;
    callers keep the part in ``cpu_dedicated_set``.

    :param domain_xml: ``dom.XMLDesc(0)``.
    :raises rtagent.virt.errors.HostReadError: the XML does not parse, or a
        ``cpuset`` is not a CPU list.
    """
    root = xmlutil.parse(domain_xml, "domain XML")
    found = set()
    for pin in root.findall("./cputune/vcpupin") + root.findall("./cputune/emulatorpin"):
        spec = pin.get("cpuset")
        if spec is None:
            continue
        try:
            found |= cpuspec.parse(spec)
        except ValueError as exc:
            raise errors.HostReadError(
                what=f"<{pin.tag}> of domain XML", reason=f"cpuset {spec!r}: {exc}"
            ) from exc
    return frozenset(found)
