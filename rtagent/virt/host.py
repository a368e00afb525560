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
    :param host_devices: PCI addresses (``dddd:bb:ss.f``) and ``mdev:<uuid>``
        of the host devices assigned to the domain.
    :param local_disks: the domain's disks under the instances path, as
        ``(path, capacity bytes, physical bytes)``; ``()`` when the driver
        reports no block stats (the test driver).
    :param pinned_cpus: the host CPUs its vCPUs and emulator threads are
        pinned to (``<cputune>``), empty when it pins nothing.
    """

    uuid: str
    name: str
    state: int
    vcpus: int
    memory_mb: int
    local_disks: tuple = ()
    host_devices: tuple = ()
    pinned_cpus: frozenset = frozenset()

    @property
    def state_name(self):
        return STATE_NAMES.get(self.state, "unknown")


@dataclasses.dataclass(frozen=True)
class CpuTopology:
    """Host CPU topology, as libvirt's capabilities report it."""

    sockets: int
    cores: int
    threads: int
    dies: int = 1


@dataclasses.dataclass(frozen=True)
class NumaCpu:
    """One host CPU in a NUMA cell.

    :param siblings: the CPU ids that share its core (itself included).
    """

    id: int
    socket_id: int
    core_id: int
    siblings: frozenset


@dataclasses.dataclass(frozen=True)
class NumaCell:
    """One NUMA cell of the host.

    :param memory_mb: the cell's memory in MiB (floor of libvirt's KiB).
    :param pages: ``((page size KiB, total pages), ...)`` sorted by size;
        sizes above the base page are the cell's hugepages.
    :param distances: ``((cell id, distance), ...)`` sorted by id.
    :param socket_id: the cell's socket when the driver says so for the
        cell itself (nova's ``NUMACell.socket``), which holds also for a
        cell whose CPUs are in neither CPU set; None: its CPUs' socket.
    """

    id: int
    memory_mb: int
    cpus: tuple
    pages: tuple = ()
    distances: tuple = ()
    socket_id: int | None = None

    @property
    def socket(self):
        """The cell's socket id, or None when unknown."""
        if self.socket_id is not None:
            return self.socket_id
        return self.cpus[0].socket_id if self.cpus else None

    @property
    def cpu_ids(self):
        return frozenset(c.id for c in self.cpus)

    @property
    def hugepages(self):
        """``((size KiB, total), ...)`` for sizes above the smallest page."""
        return self.pages[1:]


@dataclasses.dataclass(frozen=True)
class ProviderFacts:
    """A resource provider a host driver reports beside what the agent
    derives (nova's virt drivers: ``update_provider_tree``).

    :param parent_uuid: None for a root: the node's own (then
        ``inventories`` and ``traits`` add to the root's) or, under another
        UUID, a root the driver reports beside it (a sharing provider).
    :param inventories: ``((resource class, ((field, value), ...)), ...)``,
        each the items of a Placement inventory record.
    :param traits: the provider's traits.
    :param seeded: (the node's root only) the inventories the driver was
        handed for the root, in the form of ``inventories``: the agent's own
        figures. A class whose record the driver changed or removed is the
        driver's decision; None when it was handed none (then its records of
        the agent's classes are not taken).
    :param aggregates: the provider's aggregates as the driver reports them.
    :param managed_aggregates: every aggregate the driver has reported for
        the provider: one it no longer reports is removed, others' stay.
    """

    uuid: str
    name: str
    parent_uuid: str | None = None
    inventories: tuple = ()
    traits: frozenset = frozenset()
    seeded: tuple | None = None
    aggregates: frozenset = frozenset()
    managed_aggregates: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class DiskPool:
    """A storage pool that holds the guests' disks instead of the
    instances path (Ceph RBD, nova's ``images_type = rbd``).

    :param pool: the pool's name.
    :param shared: DISK_GB is published once, on a sharing provider that
        every host using the pool joins through an aggregate; False: on
        each host's root provider, as stock nova reports it.
    :param provider_uuid, provider_name, aggregate_uuid: the sharing
        provider and its aggregate (the same on every host of the pool).
    :param total_gb: the sharing provider's DISK_GB total (floor GiB).
    :param used_gb: GiB of data in the pool (ceil), for reporting.
    :param instance_disks: UUIDs of the instances whose disks nova made in
        the pool (``<uuid>_disk``), whichever host runs them.
    :param other_images: how many images in the pool are no instance's.
    :param stale_since: wall-clock time since which the cluster has not
        answered (these figures are the last good ones); None while fresh.
    :param error: why the last reading failed, or None.
    :param read_at: wall-clock time of the figures (left out of
        comparisons: a new reading of the same figures changes nothing).
    """

    pool: str
    shared: bool
    provider_uuid: str
    provider_name: str
    aggregate_uuid: str
    total_gb: int
    used_gb: int
    instance_disks: frozenset = frozenset()
    other_images: int = 0
    stale_since: float | None = None
    error: str | None = None
    read_at: float | None = dataclasses.field(default=None, compare=False)


# nova's MonitorMetric names whose value is an integer percent (0..100) that
# nova reports as a fraction (value / 100.0) in MonitorMetric.to_dict().
PERCENT_METRICS = frozenset(
    {
        "cpu.user.percent",
        "cpu.kernel.percent",
        "cpu.idle.percent",
        "cpu.iowait.percent",
        "cpu.percent",
    }
)

# nova's utils.strtime() (what jsonutils did to datetimes): naive UTC.
METRIC_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"


@dataclasses.dataclass(frozen=True)
class HostMetric:
    """One host metric, as nova's ``MonitorMetric`` holds it.

    :param name: nova's metric name, e.g. ``cpu.frequency``.
    :param value: an integer: MHz for ``cpu.frequency``, nanoseconds for
        ``cpu.*.time``, an integer percent (0..100) for ``cpu.*percent``.
    :param timestamp: when it was read, a naive UTC ``datetime``.
    :param source: what produced it (nova: the ``compute_driver``).
    """

    name: str
    value: int
    timestamp: object
    source: str

    def to_dict(self):
        """nova's ``MonitorMetric.to_dict()``: what ``ComputeNode.metrics``
        stores and the metrics notification carries. Percents are fractions
        there (37 -> 0.37), the timestamp a string in nova's format."""
        value = self.value / 100.0 if self.name in PERCENT_METRICS else self.value
        return {
            "name": self.name,
            "timestamp": self.timestamp.strftime(METRIC_TIME_FORMAT),
            "source": self.source,
            "value": value,
        }


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
    :param disk_available_least: GiB of the instances filesystem that are
        free once every local disk grows to its virtual size (nova's
        ``disk_available_least``; may be negative); None if not measured.
    :param cpu_topology: a :class:`CpuTopology`, or None if not reported.
    :param cpu_arch: host CPU architecture, e.g. ``x86_64``.
    :param cpu_model: libvirt's name for the host CPU model.
    :param cpu_vendor: e.g. ``Intel``, ``AMD``, ``ARM``.
    :param cpu_features: the host CPU's features (libvirt names), expanded.
    :param numa_cells: tuple of :class:`NumaCell`, sorted by id.
    :param cpu_shared_set: CPU ids for shared (VCPU) guests, or None when
        ``[compute] cpu_shared_set`` is unset.
    :param cpu_dedicated_set: CPU ids for dedicated (PCPU) guests, or None.
    :param online_cpus: the ids of the host's online CPUs, or None when the
        driver does not say (then every CPU of a NUMA cell counts).
    :param traits: the traits the host earns now (CPU features and
        capabilities); see ``trait_sources`` for why.
    :param trait_sources: ``((trait, the libvirt fact that grants it), ...)``
        sorted by trait.
    :param supported_instances: ``((arch, hypervisor type, vm mode), ...)``.
    :param libvirt_version: the daemon's libvirt version, encoded like
        ``hypervisor_version``; 0 if unknown.
    :param providers: :class:`ProviderFacts` the driver reports beyond the
        standard root inventories (nova drivers' extra classes and child
        providers), sorted parents first.
    :param driver_allocations: JSON text of the allocations the driver
        moved for ``providers`` at this reading (nova's ``ReshapeNeeded``):
        {consumer: a ``POST /reshaper`` allocation body}; None without one.
    :param node_uuid: the node's UUID when the driver owns node identity
        (nova's virt drivers: the ComputeNode's UUID); None for libvirt,
        whose node is the agent's ``compute_id``.
    :param metrics: :class:`HostMetric` values of this reading (nova's
        ``compute_monitors``); ``()`` when off or unavailable. Left out of
        comparisons: they change on every reading, and a reading that
        differs only in them says nothing new about the node's resources
        (the tracker keeps its state, snapshot and store as they are).
    :param pci_devices: the host's PCI functions, a tuple of
        :class:`rtagent.pci.model.HostDevice` sorted by address: every
        function the hypervisor lists (bridges included), whatever the
        device spec says may be assigned; NIC functions carry their
        interface name. ``()`` when the driver does not discover PCI devices
        (the nova integration, a libvirt without node devices).
    :param disk_pool: a :class:`DiskPool` when the guests' disks live in a
        storage pool (then ``local_gb`` is the pool's size), else None.
    """

    hypervisor_hostname: str
    hypervisor_type: str
    hypervisor_version: int
    vcpus: int
    memory_mb: int
    local_gb: int
    local_gb_used: int = 0
    domains: tuple = ()
    disk_available_least: int | None = None
    cpu_topology: CpuTopology | None = None
    cpu_arch: str = ""
    cpu_model: str = ""
    cpu_vendor: str = ""
    cpu_features: frozenset = frozenset()
    numa_cells: tuple = ()
    cpu_shared_set: frozenset | None = None
    cpu_dedicated_set: frozenset | None = None
    online_cpus: frozenset | None = None
    traits: frozenset = frozenset()
    trait_sources: tuple = ()
    supported_instances: tuple = ()
    libvirt_version: int = 0
    providers: tuple = ()
    driver_allocations: str | None = None
    node_uuid: str | None = None
    pci_devices: tuple = ()
    disk_pool: DiskPool | None = None
    metrics: tuple = dataclasses.field(default=(), compare=False)
