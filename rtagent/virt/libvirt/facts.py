# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Gather the raw facts of one reading from libvirt, in a bounded number of calls.

This is the only module that talks to libvirt for a reading; the probes turn
what it returns into host values. With a driver that fills the requested
stats groups (QEMU) a reading costs six calls whatever the number of domains.
"""

import collections

import libvirt

from rtagent.virt.libvirt import connection
from rtagent.virt.libvirt.probes import domains

# One bulk call for every domain, active or not (flags 0), instead of one or
# more calls per domain.
DOMAIN_STATS = (
    libvirt.VIR_DOMAIN_STATS_STATE
    | libvirt.VIR_DOMAIN_STATS_VCPU
    | libvirt.VIR_DOMAIN_STATS_BALLOON
)

HostFacts = collections.namedtuple(
    "HostFacts", ["info", "cpu_map", "hv_type", "version", "hostname", "domain_records"]
)
HostFacts.__doc__ = """Raw facts of one reading.

:param info: ``conn.getInfo()``.
:param cpu_map: ``conn.getCPUMap()``, or None if the driver lacks it.
:param hv_type: ``conn.getType()``.
:param version: ``conn.getVersion()``.
:param hostname: ``conn.getHostname()``.
:param domain_records: list of ``(uuid, name, stats, info or None)``.
"""


def gather(calls):
    """Read the host's raw facts through ``calls``.

    :param calls: a :class:`rtagent.virt.libvirt.calls.Calls`.
    :returns: a :class:`HostFacts`.
    :raises rtagent.virt.errors.HypervisorUnavailable: the connection failed.
    :raises rtagent.virt.errors.HostReadError: a fact could not be read.
    """
    conn = calls.connect()
    info = calls("node info", conn.getInfo)
    cpu_map = calls("CPU map", conn.getCPUMap, tolerate=connection.UNSUPPORTED)
    hv_type = calls("hypervisor type", conn.getType)
    version = calls("hypervisor version", conn.getVersion)
    hostname = calls("hypervisor hostname", conn.getHostname)
    stats = calls("domain stats", conn.getAllDomainStats, DOMAIN_STATS, 0)
    return HostFacts(info, cpu_map, hv_type, version, hostname, _domain_records(calls, stats))


def _domain_records(calls, stats):
    records = []
    for dom, dom_stats in stats:
        # UUIDString and name are answered from the client-side handle that
        # getAllDomainStats returned: no call to the hypervisor, not counted.
        uuid = dom.UUIDString()
        name = dom.name()
        info = None
        if domains.needs_info(dom_stats):
            # Only drivers that lack the vcpu/balloon stats groups get here
            # (in practice the test driver); QEMU fills them for every domain,
            # running or shut off. This is one extra call per domain.
            info = calls(f"info of domain {uuid}", dom.info, tolerate=connection.NO_DOMAIN)
            if info is None:
                # Undefined between the two calls: it is gone, so is it here.
                continue
        records.append((uuid, name, dom_stats, info))
    return records
