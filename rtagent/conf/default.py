"""[DEFAULT]: node identity, reserved amounts, allocation ratios and host
metrics (compute_monitors).

Names, meanings and defaults follow nova-compute's options of the same names,
so an operator's existing values carry over unchanged.
"""

import socket

from oslo_config import cfg
from oslo_utils import netutils

RATIO_OPTS = ("cpu_allocation_ratio", "ram_allocation_ratio", "disk_allocation_ratio")

node_opts = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current_hostname>",
        help="Name of this agent's host. Used as the RPC server name and in logs: "
        "1 to 255 characters, without control characters or surrounding spaces. "
        "The Placement root provider is named after the hypervisor hostname, "
        "which the host driver reports.",
    ),
    cfg.HostAddressOpt(
        "my_ip",
        default=netutils.get_my_ipv4(),
        sample_default="<host_ipv4>",
        help="IP address of this host, reported to schedulers as host_ip. "
        "Defaults to the address of the interface of the default route.",
    ),
    cfg.StrOpt(
        "state_path",
        default="/var/lib/rtagent",
        help="Directory holding the agent's durable state: the node identity "
        "file (compute_id), the claim store and a lock file. Created 0700 "
        "if missing; an existing directory keeps its mode. To keep the "
        "node UUID nova-compute registered, copy nova's compute_id file "
        "here before the first start.",
    ),
]

# Options marked mutable are applied by SIGHUP (rtagent.cmd.run.apply_conf);
# oslo.config warns "Ignoring change to immutable option" for the others.
reserved_opts = [
    cfg.IntOpt(
        "reserved_host_memory_mb",
        mutable=True,
        default=512,
        min=0,
        help="Memory in MiB kept for the host; reported as MEMORY_MB reserved.",
    ),
    cfg.IntOpt(
        "reserved_host_disk_mb",
        mutable=True,
        default=0,
        min=0,
        help="Disk in MiB kept for the host; reported as DISK_GB reserved, "
        "rounded up to whole GiB.",
    ),
    cfg.IntOpt(
        "reserved_host_cpus",
        mutable=True,
        default=0,
        min=0,
        help="Host CPUs kept for the host; reported as VCPU reserved. Must be 0 "
        "when [compute] cpu_shared_set or cpu_dedicated_set is set (as in nova): "
        "then the CPUs left out of both sets are the host's.",
    ),
    cfg.MultiStrOpt(
        "reserved_huge_pages",
        default=[],
        help="Huge pages kept for the host on one NUMA cell, nova's option and "
        "syntax: node:<cell id>,size:<page size>,count:<pages>, the size in KiB or "
        "with a unit (K/KB/KiB, M/MB/MiB, G/GB/GiB; 2MB = 2048). Give the option "
        "once per cell and page size, e.g. node:0,size:2048,count:64 and "
        "node:1,size:1GB,count:1. A malformed value stops the start (and "
        "check-config); the cell must be one of the host's NUMA cells, the size "
        "one of its page sizes and the count at most its pages of that size, "
        "otherwise the start and every audit fail with "
        "virt.invalid_reserved_huge_pages.",
    ),
]


def _ratio(name, resource):
    return cfg.FloatOpt(
        name,
        default=None,
        min=0.0,
        mutable=True,
        help=f"Allocation ratio of {resource}. When set it is pushed to Placement "
        "on every sync. When unset (or 0.0, which nova also treats as "
        "unset), the initial ratio is used when the inventory is first "
        "created and a ratio set later through the Placement API is "
        "respected.",
    )


def _initial_ratio(name, resource, default):
    return cfg.FloatOpt(
        name,
        default=default,
        min=0.0,
        mutable=True,
        help=f"Allocation ratio of {resource} used when the inventory is first "
        f"created in Placement and {name.replace('initial_', '')} is unset.",
    )


ratio_opts = [
    _ratio("cpu_allocation_ratio", "VCPU"),
    _ratio("ram_allocation_ratio", "MEMORY_MB"),
    _ratio("disk_allocation_ratio", "DISK_GB"),
    _initial_ratio("initial_cpu_allocation_ratio", "VCPU", 4.0),
    _initial_ratio("initial_ram_allocation_ratio", "MEMORY_MB", 1.0),
    _initial_ratio("initial_disk_allocation_ratio", "DISK_GB", 1.0),
]

# nova's one in-tree monitor, as nova's MonitorHandler spells it in full.
CPU_MONITOR = "nova.compute.monitors.cpu.virt_driver"

monitor_opts = [
    cfg.ListOpt(
        "compute_monitors",
        default=[],
        help="Monitors of host metrics (nova's option; a nova.conf's value carries "
        "over). The one monitor is cpu.virt_driver (also spelt virt_driver or "
        "nova.compute.monitors.cpu.virt_driver): CPU frequency, times and "
        "percents from libvirt's node CPU stats, one more libvirt call per "
        "audit, in the compute-node view's metrics (what nova's MetricsWeigher "
        "reads), the rtagent.metrics.update notification and /metrics. Empty "
        "(the default) turns metrics off. Any other name is a configuration "
        "error. Applied at start-up.",
    ),
]

ALL_OPTS = node_opts + reserved_opts + ratio_opts + monitor_opts


def cpu_monitor_enabled(monitors):
    """Tell whether ``[DEFAULT] compute_monitors`` turns the CPU metrics on.

    Names are read as nova reads them: without a dot a name is in the
    ``cpu`` namespace, and ``nova.compute.monitors.`` may be left out.

    :param monitors: the option's value (a list of names).
    :raises ValueError: a name that is not nova's ``cpu.virt_driver``.
    """
    enabled = False
    for name in monitors or ():
        full = name if "." in name else "cpu." + name
        if not full.startswith("nova.compute.monitors."):
            full = "nova.compute.monitors." + full
        if full != CPU_MONITOR:
            raise ValueError(f"unknown monitor {name!r}; the one monitor is cpu.virt_driver")
        enabled = True
    return enabled


def register_opts(conf):
    conf.register_opts(ALL_OPTS)


def list_opts():
    return {"DEFAULT": ALL_OPTS}
