"""[compute]: which host CPUs guests may use, and provider config files
(nova's option names and syntax)."""

from oslo_config import cfg

GROUP = cfg.OptGroup("compute", title="Compute host CPU options")

ALL_OPTS = [
    cfg.StrOpt(
        "cpu_shared_set",
        help="Host CPUs for shared (VCPU) guests, in nova's syntax, e.g. "
        "'0-3,^2,8': the VCPU inventory's total is their number (with the "
        "allocation ratio as usual). Unset: every online CPU when "
        "cpu_dedicated_set is unset too, no VCPU inventory when it is set. Every "
        "CPU must be online on this host and the set must not overlap "
        "cpu_dedicated_set; otherwise the start and every audit fail with "
        "virt.invalid_cpu_set. Not with [DEFAULT] reserved_host_cpus.",
    ),
    cfg.StrOpt(
        "cpu_dedicated_set",
        help="Host CPUs for dedicated (pinned) guests, nova's syntax: reported as "
        "the PCPU inventory, one PCPU per CPU, reserved 0 and allocation ratio "
        "1.0 (never overcommitted, whatever Placement holds). Checked like "
        "cpu_shared_set. Not with [DEFAULT] reserved_host_cpus.",
    ),
    cfg.BoolOpt(
        "cpu_pinning_fallback",
        default=True,
        help="nova's upgrade fallback for hosts not yet given cpu_dedicated_set: with "
        "neither cpu_dedicated_set nor cpu_shared_set, pinned guests "
        "(hw:cpu_policy=dedicated) may pin every online CPU, beside the floating "
        "guests, and count their vCPUs as VCPU (no PCPU inventory), as nova's "
        "libvirt driver and its scheduler's fallback query (unless nova's "
        "[workarounds] disable_fallback_pcpu_query) do. Setting cpu_dedicated_set "
        "later moves those guests' VCPU allocations to PCPU (docs/numa.md). False: "
        "pinned guests need cpu_dedicated_set. Read at start.",
    ),
    cfg.BoolOpt(
        "packing_host_numa_cells_allocation_strategy",
        default=False,
        mutable=True,
        help="How NUMA guests' cells are placed on the host's cells (nova's option "
        "and default): False spreads them, the least used host cells first; True "
        "packs them, the most used first, until a cell is full. Applied on SIGHUP "
        "to the next claims.",
    ),
    cfg.StrOpt(
        "provider_config_location",
        default="/etc/nova/provider_config/",
        mutable=True,
        help="Directory of provider config files (every *.yaml in it, nova's schema "
        "1.0): additional CUSTOM_* inventories and traits for the providers of this "
        "node, identified by $COMPUTE_NODE, uuid or name. A missing directory means "
        "none. Re-read on SIGHUP; a bad file then keeps the last good configuration.",
    ),
]


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts: an OptGroup holds its options' values
    # and overrides, so sharing the module's one would leak between configs.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
