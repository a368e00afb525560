# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The libvirt host driver: facts from libvirt and statvfs, through probes."""

import datetime
import functools
import logging
import os

import libvirt

from rtagent.virt import driver, errors, host, hugepages
from rtagent.virt.libvirt import calls as calls_mod
from rtagent.virt.libvirt import connection, facts
from rtagent.virt.libvirt import events as _events
from rtagent.virt.libvirt.probes import (
    capabilities,
    capability_traits,
    cpu,
    cpu_stats,
    cpu_traits,
    cpusets,
    disk,
    domains,
    hypervisor,
    memory,
    numa,
    pcidevices,
    xmlutil,
)
from rtagent.virt.libvirt.uri import validate_uri

LOG = logging.getLogger(__name__)

# Keepalive: libvirt pings every KEEPALIVE_INTERVAL s and closes the
# connection after KEEPALIVE_COUNT unanswered pings, so a hung libvirtd
# fails a reading after about interval * (count + 1) s instead of never.
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3


class LibvirtDriver(driver.HostDriver):
    """Reads the host through one reused libvirt connection.

    :param uri: libvirt connection URI, e.g. ``qemu:///system``.
    :param instances_path: directory holding instance disks; its
        filesystem's size is DISK_GB.
    :param statvfs: ``statvfs(path)``; injected by tests.
    :param opener: ``opener(uri) -> virConnect``; default ``libvirt.open``
        (see :mod:`rtagent.virt.libvirt.connection` for why read-write).
    :param cpu_shared_set: ``[compute] cpu_shared_set`` (nova's syntax), or None.
    :param cpu_dedicated_set: ``[compute] cpu_dedicated_set``, or None.
    :param reserved_huge_pages: ``[DEFAULT] reserved_huge_pages`` parsed
        (:func:`rtagent.virt.hugepages.parse`), checked against the NUMA
        cells of every reading.
    :param events: run libvirt's event loop (process-wide, started before the
        first open) for lifecycle events, close detection and keepalive.
    :param on_change: callable with no arguments, called (from the event
        thread) when a domain starts, stops, is defined or undefined, a PCI
        or net node device appears, goes or changes, or the connection is
        lost; the agent passes its loop's ``Trigger.pull``.
    :param keepalive: ``(interval s, count)``; needs ``events``.
    :param observer: a :class:`rtagent.virt.libvirt.calls.CallObserver`
        told, on the calling thread, before every libvirt call this driver
        makes (readings, the open and its set-up, the close); tests use it
        to prove none is made under a tracker lock. None: no observer.
    :param cpu_metrics: read the node's CPU stats on every reading (one
        call) for nova's ``cpu.virt_driver`` metrics in ``HostView.metrics``
        (``[DEFAULT] compute_monitors``). Where libvirt cannot give them,
        the view has none; that is logged once, not an error.
    :param utcnow: callable() -> naive UTC datetime, the metrics' timestamp.
    :raises rtagent.virt.errors.InvalidConnectionURI: ``uri`` is malformed.
    :raises rtagent.virt.errors.InvalidCPUSet: a CPU set does not parse.

    ``last_call_count`` is the number of libvirt calls the last
    :meth:`read_host` made (counting the open if it opened the connection).
    Client-side accessors (``dom.UUIDString()``, ``dom.name()``) are not
    calls. On a driver that fills the domain stats it does not depend on the
    number of domains, nor on the number of PCI devices: their node devices
    are listed once per reading and a device's XML is read only when its
    name is new (or an event said it changed).
    """

    def __init__(
        self,
        uri,
        instances_path,
        statvfs=os.statvfs,
        opener=None,
        *,
        cpu_shared_set=None,
        cpu_dedicated_set=None,
        reserved_huge_pages=(),
        events=False,
        on_change=None,
        keepalive=(KEEPALIVE_INTERVAL, KEEPALIVE_COUNT),
        clock=None,
        observer=None,
        cpu_metrics=False,
        utcnow=None,
    ):
        self.uri = validate_uri(uri)
        self.instances_path = instances_path
        self._statvfs = statvfs
        self._shared = cpusets.parse_cpu_spec("cpu_shared_set", cpu_shared_set)
        self._dedicated = cpusets.parse_cpu_spec("cpu_dedicated_set", cpu_dedicated_set)
        self._reserved_pages = tuple(reserved_huge_pages)
        self._events = events
        self._keepalive = keepalive
        self._on_change = on_change
        self._observer = observer or calls_mod.CallObserver()
        if events:
            # Must precede the first open, or the connection never uses it.
            _events.start()
        kw = {"clock": clock} if clock is not None else {}
        self._connection = connection.Connection(
            uri, opener, on_open=self._setup if events else None, **kw
        )
        self._static = None
        self._info_cache = {}
        self._hostdev_cache = {}
        self._node_devices = facts.NodeDeviceCache()
        self._domain_cache = domains.DomainCache()
        self._domain_reading = facts.DomainReading(**kw)
        self._capabilities_reading = facts.CapabilitiesReading(**kw)
        # (input, result) of the last reading's derivations that are O(N) or
        # parse XML: a steady reading has the same inputs and reuses them.
        self._overcommit = (None, 0)
        self._capability_facts = (None, {})
        self._pci = (None, ())
        self._pci_unsupported = False
        self._cpu_metrics = cpu_metrics
        self._utcnow = utcnow or _utcnow
        # The last reading's CPU times (the base of the next percents), and
        # why metrics are unavailable (logged when it changes, not per tick).
        self._cpu_times = None
        self._cpu_missing = None
        self.last_call_count = 0
        self.events_received = 0

    # -- the reading ------------------------------------------------------
    def read_host(self):
        """Return a :class:`rtagent.virt.host.HostView` of the host now.

        :raises rtagent.virt.errors.HypervisorUnavailable: libvirt cannot be
            reached; the connection is dropped and the next call reopens it
            (after a backoff if the open itself failed).
        :raises rtagent.virt.errors.HostReadError: a fact could not be read,
            e.g. ``instances_path`` does not exist.
        :raises rtagent.virt.errors.InvalidCPUSet: a configured CPU set names
            CPUs the host does not have online, or the sets overlap.
        :raises rtagent.virt.errors.InvalidReservedHugePages: a reservation
            names a cell, page size or more pages the host does not have.
        """
        # Disk first: a missing instances path is a config error best reported
        # without touching libvirt.
        st = self._read_statvfs()
        local_gb, local_gb_used = disk.disk_gb(st)
        calls = calls_mod.Calls(self._connection, self._observer)
        try:
            found = facts.gather(
                calls,
                self._static,
                self._info_cache,
                self._hostdev_cache,
                cpu_stats=self._cpu_metrics,
                node_device_cache=self._node_devices,
                domain_reading=self._domain_reading,
                capabilities_reading=self._capabilities_reading,
            )
        finally:
            self.last_call_count = calls.count
        self._static = found.static
        doms = domains.domains(found.domain_records, self._domain_cache)
        online = self._online_ids(found)
        shared, dedicated = cpusets.check_cpu_sets(self._shared, self._dedicated, online)
        view = dict(
            vcpus=cpu.online_cpus(found.cpu_map, found.info),
            memory_mb=memory.memory_mb(found.info),
            local_gb=local_gb,
            local_gb_used=local_gb_used,
            domains=doms,
            disk_available_least=disk.available_least_gb(
                st, doms, self.instances_path, over=self._overcommitted(doms)
            ),
            cpu_shared_set=shared,
            cpu_dedicated_set=dedicated,
            online_cpus=online,
            libvirt_version=found.static.libvirt_version,
            metrics=self._metrics(found) if self._cpu_metrics else (),
            pci_devices=self._pci_devices(found),
            **hypervisor.hypervisor(found.hv_type, found.version, found.hostname),
        )
        view.update(self._capabilities(found))
        hugepages.check(self._reserved_pages, view.get("numa_cells", ()))
        return host.HostView(**view)

    def _metrics(self, found):
        timestamp = self._utcnow()
        times = cpu_stats.cpu_times(found.cpu_stats)
        mhz = cpu_stats.frequency_mhz(found.info)
        missing = found.cpu_stats_error
        if missing is None and times is None:
            missing = f"unexpected CPU stats {found.cpu_stats!r}"
        elif missing is None and mhz is None:
            missing = f"no CPU frequency in node info {found.info!r}"
        if missing != self._cpu_missing:
            if missing is not None:
                LOG.info("No host CPU metrics from %s: %s", self.uri, missing)
            else:
                LOG.info("Host CPU metrics from %s available", self.uri)
            self._cpu_missing = missing
        if missing is not None:
            return ()
        previous, self._cpu_times = self._cpu_times, times
        return cpu_stats.cpu_metrics(times, previous, mhz, timestamp)

    def _pci_devices(self, found):
        xml_by_name = found.node_devices
        if xml_by_name is None:
            if not self._pci_unsupported:
                LOG.info("libvirt at %s lists no node devices: no PCI devices", self.uri)
                self._pci_unsupported = True
            return ()
        self._pci_unsupported = False
        # Parsing every device's XML costs O(devices) a reading; the cached
        # strings are the very same objects while nothing changed, so the
        # comparison is cheap and the last tuple is reused.
        if xml_by_name != self._pci[0]:
            self._pci = (xml_by_name, pcidevices.pci_devices(xml_by_name))
        return self._pci[1]

    def _overcommitted(self, doms):
        # The domain probe returns the very same tuple while no domain changed.
        if doms is not self._overcommit[0]:
            self._overcommit = (doms, disk.overcommitted_bytes(doms, self.instances_path))
        return self._overcommit[1]

    def _capabilities(self, found):
        # Parsing the capabilities XML and deriving traits from it costs about
        # 0.3 ms a reading; the answers change only with the host's CPU, the
        # daemon, QEMU or a reconnection. The result's values are immutable.
        key = (found.capabilities, found.static, found.version)
        if key != self._capability_facts[0]:
            self._capability_facts = (key, self._from_capabilities(found))
        return self._capability_facts[1]

    def _online_ids(self, found):
        if found.cpu_map is not None:
            return cpusets.online_ids(found.cpu_map)
        return frozenset(range(cpu.online_cpus(None, found.info)))

    def _from_capabilities(self, found):
        if found.capabilities is None:
            return {}
        root = xmlutil.parse(found.capabilities, "host capabilities")
        host_cpu = capabilities.host_cpu(root)
        features = set(host_cpu.features)
        if found.static.expanded_cpu:
            expanded = xmlutil.parse(found.static.expanded_cpu, "expanded host CPU")
            features.update(
                f.get("name")
                for f in expanded.findall("feature")
                if f.get("name") and f.get("policy", "require") in ("require", "force")
            )
        cells = numa.cells(root)
        sources = cpu_traits.cpu_traits(host_cpu.arch, features)
        sources.update(cpu_traits.hyperthreading_traits(cells))
        sources.update(cpu_traits.arch_traits(host_cpu.arch))
        if found.static.domcaps:
            dom_traits = capability_traits.domcaps_traits(found.static.domcaps)
            sources.update(dom_traits)
            has_iommu = any(t.startswith("COMPUTE_VIOMMU_MODEL_") for t in dom_traits)
            sources.update(
                capability_traits.gated_traits(
                    found.static.libvirt_version,
                    host_cpu.arch,
                    found.static.virt_type,
                    found.version,
                    has_iommu,
                )
            )
            # The driver's own capabilities assume a QEMU/KVM host that
            # answered for its domain capabilities (not the test driver).
            sources.update(capability_traits.driver_traits())
        return {
            "cpu_topology": host_cpu.topology,
            "cpu_arch": host_cpu.arch,
            "cpu_model": host_cpu.model,
            "cpu_vendor": host_cpu.vendor,
            "cpu_features": frozenset(features),
            "numa_cells": cells,
            "supported_instances": capabilities.supported_instances(root),
            "traits": frozenset(sources),
            "trait_sources": tuple(sorted(sources.items())),
        }

    # -- availability -------------------------------------------------------
    @property
    def available(self):
        """True while the hypervisor answers (False before the first reading)."""
        return self._connection.available

    @property
    def unavailable_reason(self):
        """Why the hypervisor is unavailable (libvirt's words), or None."""
        return self._connection.unavailable_reason

    @property
    def managed_traits(self):
        """Every trait this driver could report, so that one it stops
        reporting is removed from Placement (and no others are)."""
        return _managed_traits()

    def close(self):
        """Close the libvirt connection. Safe to call more than once."""
        self._observer.before("close connection")
        self._connection.close()

    @property
    def connection_opens(self):
        """How many times a connection has been opened (1 while it is reused)."""
        return self._connection.opens

    # -- events (libvirt's event thread) -----------------------------------
    def _setup(self, conn):
        # Runs inside Connection.get(), on the reading's thread, outside Calls.
        self._observer.before("connection setup")
        interval, count = self._keepalive
        try:
            conn.setKeepAlive(interval, count)
        except libvirt.libvirtError as exc:
            # Only remote connections have keepalive (not the embedded test
            # driver); events are still worth registering without it.
            if exc.get_error_code() not in connection.UNSUPPORTED:
                raise
        conn.registerCloseCallback(self._on_close, None)
        conn.domainEventRegisterAny(
            None, libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE, self._on_lifecycle, None
        )
        # Hot-plugged or unplugged devices change a domain without a
        # lifecycle event; its cached host devices must be read again.
        for event_id in (
            libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED,
            libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED,
        ):
            conn.domainEventRegisterAny(None, event_id, self._on_device, None)
        # Last: a daemon without the node-device driver refuses these, and
        # then hot-plug and removal are still seen at the next reading (a
        # name appears or goes); only a card swapped into the same slot
        # between two readings would keep its old XML.
        try:
            conn.nodeDeviceEventRegisterAny(
                None,
                libvirt.VIR_NODE_DEVICE_EVENT_ID_LIFECYCLE,
                self._on_node_device_lifecycle,
                None,
            )
            conn.nodeDeviceEventRegisterAny(
                None, libvirt.VIR_NODE_DEVICE_EVENT_ID_UPDATE, self._on_node_device, None
            )
        except libvirt.libvirtError as exc:
            LOG.info(
                "No node-device events from %s (%s): PCI changes are seen at the next audit",
                self.uri,
                connection.message(exc),
            )

    def _on_lifecycle(self, _conn, dom, event, detail, _opaque):
        self.events_received += 1
        self._info_cache.clear()
        self._hostdev_cache.pop(dom.UUIDString(), None)
        # After the caches: a reading that takes the new epoch finds them
        # emptied.
        self._domain_reading.forget()
        LOG.debug("libvirt lifecycle event %s/%s for domain %s", event, detail, dom.name())
        self._notify()

    def _on_device(self, _conn, dom, device, _opaque):
        self.events_received += 1
        self._hostdev_cache.pop(dom.UUIDString(), None)
        self._domain_reading.forget()
        LOG.debug("libvirt device event for domain %s (%s)", dom.name(), device)
        self._notify()

    def _on_node_device_lifecycle(self, conn, dev, _event, _detail, opaque):
        # Created, deleted, defined or undefined: the same for the cache.
        self._on_node_device(conn, dev, opaque)

    def _on_node_device(self, _conn, dev, _opaque):
        self.events_received += 1
        name = dev.name()  # client-side, no call back into libvirt
        self._node_devices.forget(name)
        # libvirt names them pci_DDDD_BB_SS_F and net_<ifname>_<mac>; other
        # devices (USB, SCSI, storage) change no PCI inventory.
        if name.startswith(("pci_", "net_")):
            LOG.debug("libvirt node device event for %s", name)
            self._notify()

    def _on_close(self, conn, reason, _opaque):
        why = connection.CLOSE_REASONS.get(reason, f"reason {reason}")
        LOG.warning("libvirt connection %s closed: %s", self.uri, why)
        self._connection.lost(conn, why)
        self._notify()

    def _notify(self):
        callback = self._on_change
        if callback is not None:
            try:
                callback()
            except Exception:
                LOG.exception("on_change callback failed")

    def _read_statvfs(self):
        try:
            return self._statvfs(self.instances_path)
        except FileNotFoundError as exc:
            raise errors.HostReadError(
                what="instances filesystem",
                reason=f"instances_path {self.instances_path} does not exist",
            ) from exc
        except OSError as exc:
            raise errors.HostReadError(
                what="instances filesystem",
                reason=f"statvfs({self.instances_path}) failed: {exc.strerror or exc}",
            ) from exc


def _utcnow():
    # nova's timeutils.utcnow(): naive UTC.
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


@functools.cache
def _managed_traits():
    # Read once per process: the traits os_traits defines do not change
    # while it runs, and listing them costs ~8 ms (was paid on every tick).
    arches = ("x86_64", "aarch64")
    return capability_traits.managed_traits() | frozenset().union(
        *(cpu_traits.managed_traits(a) for a in arches)
    )
