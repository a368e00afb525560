# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Hypervisor probe: what the hypervisor is and what it calls this host."""

from rtagent.virt import errors


def hypervisor(hv_type, version, hostname):
    """Check and normalise the hypervisor's identity.

    The hostname names the root resource provider in Placement, so an empty
    one is an error rather than a provider named ''.

    :param hv_type: ``conn.getType()``, e.g. ``'QEMU'`` or ``'TEST'``.
    :param version: ``conn.getVersion()``: major * 1,000,000 + minor * 1,000
        + release.
    :param hostname: ``conn.getHostname()``.
    :returns: a dict with ``hypervisor_type``, ``hypervisor_version`` and
        ``hypervisor_hostname``, the keyword names of ``HostView``.
    :raises rtagent.virt.errors.HostReadError: a value is missing or bad.
    """
    if not isinstance(hv_type, str) or not hv_type:
        raise errors.HostReadError(what="hypervisor type", reason=f"got {hv_type!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise errors.HostReadError(what="hypervisor version", reason=f"got {version!r}")
    if not isinstance(hostname, str) or not hostname.strip():
        raise errors.HostReadError(what="hypervisor hostname", reason=f"got {hostname!r}")
    return {
        "hypervisor_type": hv_type,
        "hypervisor_version": version,
        "hypervisor_hostname": hostname.strip(),
    }
