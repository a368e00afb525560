# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The libvirt host driver: facts from libvirt and statvfs, through probes."""

import os

from rtagent.virt import driver, errors, host
from rtagent.virt.libvirt import calls as calls_mod
from rtagent.virt.libvirt import connection, facts
from rtagent.virt.libvirt.probes import cpu, disk, domains, hypervisor, memory
from rtagent.virt.libvirt.uri import validate_uri


class LibvirtDriver(driver.HostDriver):
    """Reads the host through one reused libvirt connection.

    :param uri: libvirt connection URI, e.g. ``qemu:///system``.
    :param instances_path: directory holding instance disks; its
        filesystem's size is DISK_GB.
    :param statvfs: ``statvfs(path)``; injected by tests.
    :param opener: ``opener(uri) -> virConnect``; default
        ``libvirt.openReadOnly``.
    :raises rtagent.virt.errors.InvalidConnectionURI: ``uri`` is malformed.

    ``last_call_count`` is the number of libvirt calls the last
    :meth:`read_host` made (counting the open if it opened the connection).
    Client-side accessors (``dom.UUIDString()``, ``dom.name()``) are not
    calls. On a driver that fills the domain stats it does not depend on the
    number of domains.
    """

    def __init__(self, uri, instances_path, statvfs=os.statvfs, opener=None):
        self.uri = validate_uri(uri)
        self.instances_path = instances_path
        self._statvfs = statvfs
        self._connection = connection.Connection(uri, opener)
        self.last_call_count = 0

    def read_host(self):
        """Return a :class:`rtagent.virt.host.HostView` of the host now.

        :raises rtagent.virt.errors.HypervisorUnavailable: libvirt cannot be
            reached; the connection is dropped and the next call reopens it.
        :raises rtagent.virt.errors.HostReadError: a fact could not be read,
            e.g. ``instances_path`` does not exist.
        """
        # Disk first: a missing instances path is a config error best reported
        # without touching libvirt.
        local_gb, local_gb_used = disk.disk_gb(self._read_statvfs())
        calls = calls_mod.Calls(self._connection)
        try:
            found = facts.gather(calls)
        finally:
            self.last_call_count = calls.count
        return host.HostView(
            vcpus=cpu.online_cpus(found.cpu_map, found.info),
            memory_mb=memory.memory_mb(found.info),
            local_gb=local_gb,
            local_gb_used=local_gb_used,
            domains=domains.domains(found.domain_records),
            **hypervisor.hypervisor(found.hv_type, found.version, found.hostname),
        )

    def close(self):
        """Close the libvirt connection. Safe to call more than once."""
        self._connection.close()

    @property
    def connection_opens(self):
        """How many times a connection has been opened (1 while it is reused)."""
        return self._connection.opens

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
