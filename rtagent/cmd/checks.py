"""Start-up checks that need more than oslo.config: the messaging URLs
(oslo.messaging parses them), the CPU sets (the host's online CPUs) and the
reserved huge pages (the host's NUMA cells).

Like :mod:`rtagent.conf.validation` they run before the state directory is
touched or anything is sent over the network, and a failure is one
:class:`~rtagent.conf.validation.ConfigError` that names the option.
"""

import logging
import re
import threading
import urllib.parse
from importlib import metadata

from rtagent.conf.validation import ConfigError

LOG = logging.getLogger(__name__)

# A hung libvirtd must not hang the start: past this, the CPU sets and
# huge pages are left to the first audit, which checks them too.
HOST_TIMEOUT_S = 10.0
_MAX_PORT = 65535


def check_transport_urls(conf):
    """Parse ``[DEFAULT] transport_url`` and the notifications' one.

    oslo.messaging parses them only when the agent connects, after the
    first audit, and a typo then ends the service with a traceback.

    :raises ConfigError: a URL does not parse, has a port out of range, or
        names a driver that is not installed.
    """
    from rtagent.rpc import transport

    om = transport.messaging()
    drivers = sorted(e.name for e in metadata.entry_points(group="oslo.messaging.drivers"))
    urls = [("DEFAULT", conf.transport_url)]
    if "oslo_messaging_notifications" in conf:
        notifications = conf.oslo_messaging_notifications
        urls.append(("oslo_messaging_notifications", notifications.transport_url))
    for group, url in urls:
        if not url:
            continue

        def fail(reason, group=group, url=url):
            raise ConfigError(
                group=group, option="transport_url", reason=f"{_masked(url)}: {reason}"
            )

        try:
            parsed = om.TransportURL.parse(conf, url)
            ports = [host.port for host in parsed.hosts]
        except (om.InvalidTransportURL, ValueError) as exc:
            fail(f"{exc}; expected driver://[user:pass@]host:port[,...]/[vhost]")
        if parsed.transport not in drivers:
            fail(f"no driver {parsed.transport!r} (installed: {', '.join(drivers)})")
        for port in ports:
            if port is not None and not 0 < port <= _MAX_PORT:
                fail(f"port {port} is out of range")


def _masked(url):
    """``url`` with any password replaced by ``***`` (the message is logged)."""
    # The user part runs to the LAST "@" before the host: a password with
    # an unencoded "/" or "@" is exactly what makes the URL fail to parse,
    # and the failure is printed.
    return re.sub(r"(?<=://)[^:@]*:.*@", lambda m: m.group(0).split(":", 1)[0] + ":***@", url)


def check_host(conf, timeout=HOST_TIMEOUT_S):
    """Check ``[compute] cpu_shared_set`` / ``cpu_dedicated_set`` against the
    host's online CPUs, ``[DEFAULT] reserved_huge_pages`` against its NUMA
    cells, and the ``[pci] device_spec`` rules that depend on the host's
    devices (:func:`rtagent.pci.spec.check_host`: a ``remote_managed``
    spec's devname, a PF it would match, a one-time-use VF), as the audit
    would, but before anything is written.

    The host comes from libvirt (a read-only connection, closed at once),
    the source the audit uses; the test driver's host is not the machine's.
    A remote URI, or a hypervisor that does not answer, skips the check
    (the first audit makes it).

    :raises rtagent.virt.errors.InvalidCPUSet: a set does not parse, names a
        CPU that is not online, or the sets overlap; its message names the
        option.
    :raises rtagent.virt.errors.InvalidReservedHugePages: a reservation
        names a cell, page size or more pages than the host has (a
        malformed one is :func:`rtagent.conf.validation.validate`'s to
        report: it is left out here, so ``check-config`` says it once).
    :raises rtagent.pci.errors.InvalidDeviceSpec: a device spec breaks a
        rule against the host's devices; its message names the entry.
    """
    from rtagent.conf import pci as pci_conf
    from rtagent.pci import errors as pci_errors
    from rtagent.pci import spec as pci_spec
    from rtagent.virt import errors, hugepages

    shared, dedicated = conf.compute.cpu_shared_set, conf.compute.cpu_dedicated_set
    try:
        reserved = hugepages.parse(conf.reserved_huge_pages)
    except errors.InvalidReservedHugePages:
        reserved = ()
    try:
        pci = pci_conf.parse(conf)
    except (pci_errors.PciError, ValueError):
        pci = None  # validate's to report, once
    # Only these rules read the host's devices (a list and an XML read per
    # device): without them, the check costs nothing more.
    devices_needed = pci is not None and (
        any(s.tags.get("remote_managed") for s in pci.device_specs)
        or (pci.report_in_placement and pci.device_specs)
    )
    if not (shared or dedicated or reserved or devices_needed):
        return
    from rtagent.virt.libvirt.probes import cpusets

    shared = cpusets.parse_cpu_spec("cpu_shared_set", shared)
    dedicated = cpusets.parse_cpu_spec("cpu_dedicated_set", dedicated)
    uri = conf.libvirt.connection_uri
    if urllib.parse.urlsplit(uri).hostname:
        return  # another host's: asking would be network I/O before the checks end
    found = _read_host(uri, timeout, cells=bool(reserved), devices=devices_needed)
    if found is None:
        return
    online, cells, devices = found
    cpusets.check_cpu_sets(shared, dedicated, online)
    hugepages.check(reserved, cells)
    if devices_needed and devices is not None:
        pci_spec.check_host(pci.device_specs, devices, pci.report_in_placement)
        if pci.report_in_placement:
            _check_pci_layout(pci.device_specs, devices)


def _check_pci_layout(specs, devices):
    """Refuse, before the start, the devices the audit could not report to
    Placement (a PF tracked with its VFs, one PF's VFs in two classes).
    :raises rtagent.pci.errors.PlacementLayoutInvalid: as the audit would."""
    from rtagent.pci import devices as pci_devices
    from rtagent.pci import node as pci_node
    from rtagent.placement import pci_providers

    table = pci_devices.refresh(pci_devices.make_table(), pci_node.tracked(devices, specs))
    # The node's UUID and name do not change what is refused.
    pci_providers.layout(table, "00000000-0000-0000-0000-000000000000", "check-config")


def _read_host(uri, timeout, cells, devices=False):
    """``(online CPU ids, NUMA cells, PCI devices)`` libvirt reports at
    ``uri`` (the cells only when ``cells``, else ``()``; the devices, as
    :class:`~rtagent.pci.model.HostDevice` values, only when ``devices``,
    else None, and None where libvirt cannot list them), or None if it does
    not answer within ``timeout`` seconds."""
    import libvirt

    from rtagent.virt import errors
    from rtagent.virt.libvirt import connection, facts
    from rtagent.virt.libvirt.probes import cpusets, numa, pcidevices, xmlutil

    def pci_devices(conn):
        try:
            listed = conn.listAllDevices(facts.NODE_DEVICE_FLAGS)
        except libvirt.libvirtError:
            return None  # no node-device driver: the audit says so
        xml_by_name = {}
        for dev in listed:
            try:
                xml_by_name[dev.name()] = dev.XMLDesc(0)
            except libvirt.libvirtError:
                continue  # removed meanwhile
        return pcidevices.pci_devices(xml_by_name)

    connection.silence_libvirt()
    found = {}

    def read():
        try:
            conn = libvirt.openReadOnly(uri)
            try:
                online = cpusets.online_ids(conn.getCPUMap())
                caps = conn.getCapabilities() if cells else None
                pci = pci_devices(conn) if devices else None
            finally:
                conn.close()
            host_cells = numa.cells(xmlutil.parse(caps, "host capabilities")) if caps else ()
            found["host"] = (online, host_cells, pci)
        except libvirt.libvirtError as exc:
            found["error"] = connection.message(exc)
        except errors.HostReadError as exc:  # capabilities it cannot parse
            found["error"] = str(exc)

    # A daemon thread: a libvirtd that never answers must not keep the
    # process alive either.
    reader = threading.Thread(target=read, name="host-config-check", daemon=True)
    reader.start()
    reader.join(timeout)
    if "host" in found:
        return found["host"]
    LOG.warning(
        "CPU sets, huge pages and PCI device specs not checked at start-up: libvirt at %s %s; "
        "the first audit checks them",
        uri,
        f"failed: {found['error']}" if "error" in found else f"gave no answer in {timeout:g} s",
    )
    return None


def check_provider_configs(conf):
    """Read the provider config files (``[compute]
    provider_config_location``) as ``rtagent run`` reads them at start,
    before the state directory is touched: the same limits (regular files,
    sizes, count), YAML and schema checks.

    :returns: one line per key schema 1.0 does not have (the running agent
        warns of each and ignores it).
    :raises rtagent.placement.provider_config.ProviderConfigError: a file
        or the directory ``rtagent run`` refuses.
    """
    from rtagent.placement import provider_config

    unknown = []
    provider_config.load(conf.compute.provider_config_location, unknown)
    return unknown
