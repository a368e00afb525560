"""What a host driver reports: plain, immutable values.

A :class:`HostView` is one audit's reading of the hypervisor. It carries no
connection and no behaviour, so the tracker can hold it under its lock and
tests can build one by hand.
"""

import dataclasses

# Domain states, as libvirt numbers them (virDomainState). Kept here so the
# tracker and tests need not import libvirt.
DOMAIN_NOSTATE = 0
DOMAIN_RUNNING = 1
DOMAIN_BLOCKED = 2
DOMAIN_PAUSED = 3
DOMAIN_SHUTDOWN = 4
DOMAIN_SHUTOFF = 5
DOMAIN_CRASHED = 6
DOMAIN_PMSUSPENDED = 7

STATE_NAMES = {
    DOMAIN_NOSTATE: "nostate",
    DOMAIN_RUNNING: "running",
    DOMAIN_BLOCKED: "blocked",
    DOMAIN_PAUSED: "paused",
    DOMAIN_SHUTDOWN: "shutdown",
    DOMAIN_SHUTOFF: "shutoff",
    DOMAIN_CRASHED: "crashed",
    DOMAIN_PMSUSPENDED: "pmsuspended",
}


@dataclasses.dataclass(frozen=True)
class DomainInfo:
    """One domain defined on the host.

    :param uuid: the domain UUID (the Nova instance UUID for Nova guests).
    :param name: the libvirt domain name.
    :param state: a ``DOMAIN_*`` constant.
    :param vcpus: current vCPU count.
    :param memory_mb: current memory in MiB.
    """

    uuid: str
    name: str
    state: int
    vcpus: int
    memory_mb: int

    @property
    def state_name(self):
        return STATE_NAMES.get(self.state, "unknown")


@dataclasses.dataclass(frozen=True)
class HostView:
    """One reading of the host's resources.

    :param hypervisor_hostname: the name the hypervisor reports; the root
        resource provider in Placement is named after it.
    :param hypervisor_type: e.g. ``QEMU`` or ``TEST``.
    :param hypervisor_version: libvirt's integer encoding of the hypervisor
        version (major * 1,000,000 + minor * 1,000 + release).
    :param vcpus: usable host CPUs (online CPUs).
    :param memory_mb: host memory in MiB.
    :param local_gb: size of the instances filesystem in GiB (floor).
    :param local_gb_used: space used on it in GiB (ceil), for reporting.
    :param domains: the domains on the host, sorted by UUID.
    """

    hypervisor_hostname: str
    hypervisor_type: str
    hypervisor_version: int
    vcpus: int
    memory_mb: int
    local_gb: int
    local_gb_used: int = 0
    domains: tuple = ()
