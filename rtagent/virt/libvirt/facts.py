# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Gather the raw facts of one reading from libvirt, in a bounded number of calls.

This is the only module that talks to libvirt for a reading; the probes turn
what it returns into host values. With a driver that fills the requested
stats groups (QEMU) a steady reading costs seven calls whatever the number of
domains and PCI devices (one more when a domain's state changed: the states,
then the full stats; one more when the capabilities kept are 300 s old), one
more with host metrics (``getCPUStats``).
"""

import collections
import logging
import threading
import time

import libvirt

from rtagent.virt import errors
from rtagent.virt.libvirt import connection
from rtagent.virt.libvirt.probes import capabilities, cputune, domains, hostdevs, xmlutil

LOG = logging.getLogger(__name__)

# One bulk call for every domain, active or not (flags 0), instead of one or
# more calls per domain.
DOMAIN_STATS = (
    libvirt.VIR_DOMAIN_STATS_STATE
    | libvirt.VIR_DOMAIN_STATS_VCPU
    | libvirt.VIR_DOMAIN_STATS_BALLOON
    | libvirt.VIR_DOMAIN_STATS_BLOCK
)
# What a steady reading asks first: the domains' states alone, which
# libvirtd answers from its own records. The other groups make it query each
# running guest's QEMU monitor: at 32 guests here libvirtd spent 0.24 ms of
# CPU on a states-only call against 25.7 ms on DOMAIN_STATS
# (benchmarks/hypervisor_audit.py), as much as nova's 88 calls per periodic.
DOMAIN_STATES = libvirt.VIR_DOMAIN_STATS_STATE
# A steady reading reuses the domains' sizes read in full at most this long
# ago: a guest's balloon and its disks' allocation change without an event.
FULL_READ_MAX_AGE_S = 300.0
_STATE_PREFIX = "state."
# PCI functions, the net devices that name a NIC function's interface, and
# the vDPA devices that make a VF a vDPA device.
NODE_DEVICE_FLAGS = (
    libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV
    | libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_NET
    | libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_VDPA
)
# A device listed and then removed (hot-unplug, a VF count lowered) before
# its XML is read.
NO_NODE_DEVICE = frozenset({libvirt.VIR_ERR_NO_NODE_DEVICE})

HostFacts = collections.namedtuple(
    "HostFacts",
    [
        "info",
        "cpu_map",
        "hv_type",
        "version",
        "hostname",
        "domain_records",
        "capabilities",
        "static",
        "cpu_stats",
        "cpu_stats_error",
        "node_devices",
    ],
    defaults=(None, None, None),
)
HostFacts.__doc__ = """Raw facts of one reading.

:param info: ``conn.getInfo()``.
:param cpu_map: ``conn.getCPUMap()``, or None if the driver lacks it.
:param hv_type: ``conn.getType()``.
:param version: ``conn.getVersion()``.
:param hostname: ``conn.getHostname()``.
:param domain_records: list of ``(uuid, name, stats, info or None)``.
:param capabilities: ``conn.getCapabilities()`` XML, or None if unsupported.
:param static: a :class:`StaticFacts` read once per connection.
:param cpu_stats: ``conn.getCPUStats(ALL_CPUS)`` (nanoseconds), when asked
    for and given; else None.
:param cpu_stats_error: why they were asked for and not given (libvirt's
    words), else None; the reading goes on without host metrics.
:param node_devices: dict node-device name -> ``XMLDesc(0)`` of the PCI and
    ``net`` node devices, when asked for; None when not asked for or the
    driver has no node devices (``VIR_ERR_NO_SUPPORT``).
"""


StaticFacts = collections.namedtuple(
    "StaticFacts", ["opens", "libvirt_version", "domcaps", "expanded_cpu", "virt_type"]
)
StaticFacts.__doc__ = """Facts that do not change while a connection is open.

They are read on the first reading after each (re)open: a new daemon (an
upgrade, a restart) may answer differently, and reconnecting is the only way
a new daemon can appear. ``domcaps`` and ``expanded_cpu`` are None where the
driver does not support them (the test driver).

:param opens: ``Connection.opens`` when read.
:param libvirt_version: the daemon's ``getLibVersion()``.
:param domcaps: ``getDomainCapabilities`` XML for the host arch and the
    domain type guests get, or None.
:param expanded_cpu: ``baselineCPU([host cpu], EXPAND_FEATURES)`` XML, or None.
:param virt_type: the domain type guests get on the host arch
    (:func:`.probes.capabilities.virt_type`), which ``domcaps`` were asked
    for; None without capabilities or guest support.
"""


class DomainReading:
    """The last reading's domains, kept by the caller across readings.

    A reading first asks libvirt for the domains' states alone (cheap: no
    guest's QEMU is asked anything). When it finds the very domains the last
    full reading found (the same UUIDs and names in the same order, equal
    states), with no domain event since and that reading younger than
    ``max_age_s``, it returns that reading's records themselves: the
    comparison runs in C, over three lists, with no Python work per domain;
    the domain probe then knows the records by identity. Otherwise the
    domains are read in full (:data:`DOMAIN_STATS`) and kept.

    :param max_age_s: seconds after which a steady reading reads in full
        again (balloon and disk allocation change without an event).
    :param clock: monotonic seconds (injected by tests).
    """

    def __init__(self, max_age_s=FULL_READ_MAX_AGE_S, clock=time.monotonic):
        # Bumped by forget(): a reading that started before an event is
        # kept under the older epoch, so the next one reads every domain.
        self.epoch = 0
        self.max_age_s = max_age_s
        self._clock = clock
        self._last = None

    def forget(self):
        """A domain changed (libvirt's event thread)."""
        self.epoch += 1

    def clear(self):
        self._last = None

    def reusable(self, epoch):
        """Whether a reading started at ``epoch`` may reuse the kept one
        (none kept, an event since or too old: read in full at once)."""
        last = self._last
        return last is not None and last[0] == epoch and self._clock() - last[5] < self.max_age_s

    def same(self, epoch, uuids, names, states):
        """The records kept, if this reading (started at ``epoch``) found
        the domains and states the kept one found, soon enough; else None."""
        last = self._last
        if self.reusable(epoch) and last[3] == states and last[1] == uuids and last[2] == names:
            return last[4]
        return None

    def keep(self, epoch, uuids, names, states, records):
        self._last = (epoch, uuids, names, states, records, self._clock())


class CapabilitiesReading:
    """The host's capabilities XML, kept across the readings of one
    connection and read again once :data:`FULL_READ_MAX_AGE_S` old.

    libvirtd formats the whole document on every ``getCapabilities`` (1.1 ms
    of its CPU here, the dearest of a steady reading's calls), for facts
    that change with the hardware or the huge pages set aside: NUMA cells,
    their memory and page sizes, the CPU topology. CPUs going on- or
    offline are read at every audit (``getCPUMap``).

    :param clock: monotonic seconds (injected by tests).
    """

    def __init__(self, max_age_s=FULL_READ_MAX_AGE_S, clock=time.monotonic):
        self.max_age_s = max_age_s
        self._clock = clock
        self._kept = None

    def get(self, opens):
        """The XML kept from connection ``opens``, if young enough; else None."""
        kept = self._kept
        if kept is not None and kept[0] == opens and self._clock() - kept[2] < self.max_age_s:
            return kept[1]
        return None

    def keep(self, opens, caps):
        self._kept = (opens, caps, self._clock())


class NodeDeviceCache:
    """Node-device XML kept across readings: name -> ``XMLDesc(0)``.

    A device's XML is read when its name first appears and kept while it is
    listed, so a steady reading costs one list call whatever the number of
    devices. Hot-plug is a new name, removal a name no longer listed. A card
    swapped into the same slot keeps the name: :meth:`forget`, called on a
    node-device event, makes the next reading read it again.
    """

    def __init__(self):
        self._xml = {}
        # forget() runs in libvirt's event thread, the rest in the audit's.
        self._mutex = threading.Lock()
        # Bumped by forget(): an XML read while it changed may predate the
        # event and is used once, not kept.
        self.epoch = 0

    def get(self, name):
        with self._mutex:
            return self._xml.get(name)

    def keep(self, name, xml, epoch):
        """Keep ``xml`` unless a device was forgotten since ``epoch``."""
        with self._mutex:
            if epoch == self.epoch:
                self._xml[name] = xml

    def forget(self, name):
        """Drop ``name`` (libvirt's event thread)."""
        with self._mutex:
            self.epoch += 1
            self._xml.pop(name, None)

    def prune(self, listed):
        """Drop every name not in ``listed``."""
        with self._mutex:
            for gone in set(self._xml) - set(listed):
                del self._xml[gone]

    def clear(self):
        with self._mutex:
            self._xml.clear()

    def __len__(self):
        return len(self._xml)


def gather(
    calls,
    static=None,
    info_cache=None,
    hostdev_cache=None,
    *,
    cpu_stats=False,
    node_device_cache=None,
    domain_reading=None,
    capabilities_reading=None,
):
    """Read the host's raw facts through ``calls``.

    :param calls: a :class:`rtagent.virt.libvirt.calls.Calls`.
    :param static: the :class:`StaticFacts` of an earlier reading; reused
        while the connection it was read on is still the open one.
    :param info_cache: dict ``uuid -> (state, dom.info())`` kept by the
        caller across readings, for drivers without vCPU/balloon stats.
    :param hostdev_cache: dict ``uuid -> (host devices, pinned CPUs)`` kept
        by the caller across readings and emptied on domain events: a
        domain's XML is read once when it appears, not on every audit.
        None: not read.
    :param cpu_stats: also read the node's CPU stats (one call, for host
        metrics); their failure never fails the reading.
    :param node_device_cache: a :class:`NodeDeviceCache` kept by the caller:
        the PCI and net node devices are listed (one call) and only new
        names' XML is read. None: not read.
    :param domain_reading: a :class:`DomainReading` kept by the caller (who
        calls its ``forget`` on every domain event): a steady reading
        returns the last records. None: every domain is read again.
    :param capabilities_reading: a :class:`CapabilitiesReading` kept by the
        caller: the capabilities are read once per connection and
        :data:`FULL_READ_MAX_AGE_S`. None: at every reading.
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
    caps = capabilities_reading.get(calls.opens) if capabilities_reading is not None else None
    if caps is None:
        caps = calls("capabilities", conn.getCapabilities, tolerate=connection.UNSUPPORTED)
        if caps is not None and capabilities_reading is not None:
            capabilities_reading.keep(calls.opens, caps)
    if static is None or static.opens != calls.opens:
        static = _static(calls, conn, caps)
        for cache in (info_cache, hostdev_cache, node_device_cache, domain_reading):
            if cache is not None:
                cache.clear()  # a new connection may be a new daemon
    records = _domains(calls, conn, info_cache, hostdev_cache, domain_reading)
    host_stats, host_stats_error = _cpu_stats(calls, conn) if cpu_stats else (None, None)
    return HostFacts(
        info,
        cpu_map,
        hv_type,
        version,
        hostname,
        records,
        caps,
        static,
        host_stats,
        host_stats_error,
        None if node_device_cache is None else _node_devices(calls, conn, node_device_cache),
    )


def _domains(calls, conn, info_cache, hostdev_cache, reading):
    """The reading's domain records: the last full reading's own list when
    ``reading`` finds the same domains in the same states, else one pass
    over the domains' full stats."""
    # Taken before the stats: an event during this reading leaves what it
    # keeps under the older epoch.
    epoch = reading.epoch if reading is not None else None
    if reading is not None and reading.reusable(epoch):
        listed = calls("domain states", conn.getAllDomainStats, DOMAIN_STATES, 0)
        # UUIDString and name are answered from the client-side handles that
        # getAllDomainStats returned: no call to the hypervisor, not counted.
        records = reading.same(
            epoch,
            [dom.UUIDString() for dom, _ in listed],
            [dom.name() for dom, _ in listed],
            [_states(dom_stats) for _, dom_stats in listed],
        )
        if records is not None:
            return records
    stats = calls("domain stats", conn.getAllDomainStats, DOMAIN_STATS, 0)
    uuids = [dom.UUIDString() for dom, _ in stats]
    names = [dom.name() for dom, _ in stats]
    records = _domain_records(
        calls, stats, uuids, names, info_cache=info_cache, hostdev_cache=hostdev_cache
    )
    if reading is not None and len(records) == len(stats):
        # (A domain gone between the calls is left out of these records;
        # they are not kept, lest a listing that still names it reuse them.)
        reading.keep(epoch, uuids, names, [_states(s) for _, s in stats], records)
    return records


def _states(dom_stats):
    """The state group of a domain's stats, as a states-only call answers."""
    return {k: v for k, v in dom_stats.items() if k.startswith(_STATE_PREFIX)}


def _node_devices(calls, conn, cache):
    listed = calls(
        "node devices", conn.listAllDevices, NODE_DEVICE_FLAGS, tolerate=connection.UNSUPPORTED
    )
    if listed is None:
        cache.clear()
        return None
    found = {}
    for dev in listed:
        name = dev.name()  # client-side, not a call
        xml = cache.get(name)
        if xml is None:
            epoch = cache.epoch
            xml = calls(f"XML of node device {name}", dev.XMLDesc, 0, tolerate=NO_NODE_DEVICE)
            if xml is None:
                continue  # removed between the list and the read: gone
            cache.keep(name, xml, epoch)
        found[name] = xml
    cache.prune(found)
    return found


def _cpu_stats(calls, conn):
    # Metrics are optional: any failure but a lost connection (which fails
    # the reading anyway) leaves them out, as nova's monitor does.
    try:
        found = calls(
            "node CPU stats",
            conn.getCPUStats,
            libvirt.VIR_NODE_CPU_STATS_ALL_CPUS,
            0,
            tolerate=connection.UNSUPPORTED,
        )
    except errors.HostReadError as exc:
        return None, exc.kwargs.get("reason") or str(exc)
    if found is None:
        return None, "not supported by this libvirt driver"
    return found, None


def _static(calls, conn, caps):
    lib_version = calls("libvirt version", conn.getLibVersion, tolerate=connection.UNSUPPORTED)
    domcaps = expanded = vtype = None
    if caps is not None:
        root = xmlutil.parse(caps, "host capabilities")
        cpu = capabilities.host_cpu(root)
        vtype = capabilities.virt_type(capabilities.supported_instances(root), cpu.arch)
        if vtype is not None:
            domcaps = calls(
                "domain capabilities",
                conn.getDomainCapabilities,
                None,
                cpu.arch,
                None,
                vtype,
                0,
                tolerate=connection.UNSUPPORTED | connection.OPTIONAL_FAILURES | connection.DENIED,
            )
            if domcaps is None and vtype in ("kvm", "qemu"):
                LOG.warning(
                    "No domain capabilities for %s/%s (read-only connection or "
                    "unsupported): no COMPUTE_* capability traits",
                    cpu.arch,
                    vtype,
                )
    if caps is not None and cpu.model:
        # Without a model (the test driver's host) there is nothing to expand.
        expanded = calls(
            "expanded host CPU",
            conn.baselineCPU,
            [cpu.xml],
            libvirt.VIR_CONNECT_BASELINE_CPU_EXPAND_FEATURES,
            tolerate=connection.UNSUPPORTED | connection.OPTIONAL_FAILURES,
        )
    return StaticFacts(calls.opens, lib_version or 0, domcaps, expanded, vtype)


# What a domain's XML gives when it is not read: no host devices, no pins.
_NOTHING_FROM_XML = ((), frozenset())


def _domain_records(calls, stats, uuids, names, *, info_cache, hostdev_cache=None):
    records = []
    # This loop runs once per domain on every audit: locals, not lookups,
    # and no per-domain bookkeeping a steady reading does not need.
    needs_info, state_key = domains.needs_info, domains.STATE
    cached_info = info_cache.get if info_cache is not None else None
    cached_devices = hostdev_cache.get if hostdev_cache is not None else None
    info_hits = device_hits = 0
    append = records.append
    for (dom, dom_stats), uuid, name in zip(stats, uuids, names, strict=True):
        info = None
        info_hit = 0
        if needs_info(dom_stats):
            # Only drivers that lack the vcpu/balloon stats groups get here
            # (in practice the test driver); QEMU fills them for every domain,
            # running or shut off. One extra call per domain that is new or
            # whose state changed since the last reading; the cache is
            # emptied on every lifecycle event and reconnection.
            state = dom_stats.get(state_key)
            cached = cached_info(uuid) if cached_info is not None else None
            info_hit = cached is not None
            if cached is not None and state is not None and cached[0] == state:
                info = cached[1]
            else:
                info = calls(f"info of domain {uuid}", dom.info, tolerate=connection.NO_DOMAIN)
                if info is None:
                    # Undefined between the two calls: it is gone, so is it here.
                    continue
                if info_cache is not None and state is not None:
                    info_cache[uuid] = (state, info)
        if cached_devices is None:
            append((uuid, name, dom_stats, info, *_NOTHING_FROM_XML))
            info_hits += info_hit
            continue
        from_xml = cached_devices(uuid)
        if from_xml is not None:
            device_hits += 1
        else:
            xml = calls(f"XML of domain {uuid}", dom.XMLDesc, 0, tolerate=connection.NO_DOMAIN)
            if xml is None:
                continue  # undefined meanwhile
            from_xml = hostdev_cache[uuid] = (
                hostdevs.host_devices(xml),
                cputune.pinned_cpus(xml),
            )
        append((uuid, name, dom_stats, info, *from_xml))
        info_hits += info_hit
    _prune(info_cache, info_hits, records)
    _prune(hostdev_cache, device_hits, records)
    return records


def _prune(cache, hits, records):
    """Drop from a per-domain cache the domains this reading did not find.

    A cache holds more entries than the reading found in it (``hits``, which
    count only domains that made a record) only when a domain went, or came
    and was added: then, and only then, find which went. A steady reading
    builds no set.
    """
    if cache is not None and len(cache) > hits:
        seen = {record[0] for record in records}
        for gone in [uuid for uuid in cache if uuid not in seen]:
            del cache[gone]
