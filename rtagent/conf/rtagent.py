"""[rtagent]: the agent's own behaviour (audit loop, sync retries)."""

from oslo_config import cfg

GROUP = cfg.OptGroup("rtagent", title="rtagent agent options")

ALL_OPTS = [
    cfg.IntOpt(
        "audit_interval",
        default=60,
        min=1,
        help="Seconds between the end of one host audit and the start of the next.",
    ),
    cfg.BoolOpt(
        "count_untracked_domains",
        default=True,
        help="Count the vCPUs and memory of running domains that no claim "
        "accounts for (started by hand, or left from a lost state "
        "directory) as used, so claims cannot oversubscribe the host they "
        "share. They are reported as drift either way.",
    ),
    cfg.BoolOpt(
        "reserve_untracked_usage",
        default=True,
        mutable=True,
        help="Publish the usage of the untracked domains counted by "
        "count_untracked_domains as part of the reserved amount of the "
        "node's VCPU and MEMORY_MB inventories in Placement, so the "
        "scheduler does not pick a node the agent then refuses. The "
        "agent's own checks use the same reservation instead of counting "
        "that usage as used. Reserved is in physical units: untracked vCPUs "
        "are divided by the allocation ratio and rounded up (6 vCPUs at "
        "ratio 4.0 reserve 2 CPUs), and the reservation never exceeds the "
        "total. Has no effect when count_untracked_domains is false. "
        "Applied on SIGHUP.",
    ),
    cfg.IntOpt(
        "missing_domain_grace",
        default=600,
        min=0,
        help="Seconds a tracked instance may have no domain on the host "
        "(e.g. while it builds) before it is reported as missing.",
    ),
    cfg.IntOpt(
        "placement_refresh_interval",
        default=300,
        min=0,
        help="Seconds the agent may go without reading Placement while "
        "nothing changed on its side. Every local change (host, config, "
        "claims that change the provider tree) is synced at the next audit "
        "whatever this says; only changes someone else makes in Placement "
        "(an operator's allocation ratio or trait, a deleted provider) wait "
        "up to this long to be seen and reconciled. Each due read is "
        "brought forward by up to a tenth at random, so agents started "
        "together spread their reads. 0 reads Placement at every audit.",
    ),
    cfg.IntOpt(
        "placement_retry_window",
        default=110,
        min=0,
        help="Seconds within which a failed sync to Placement (Placement "
        "down or refusing) is tried again: the first retry comes at a random "
        "point of this window, each later one a full window after the "
        "previous, and the agent wakes for it without waiting for its next "
        "audit. So after an outage every agent that met it tries again "
        "within this many seconds of Placement's return, the agents of a "
        "fleet spread evenly over it. Keep it under two audit intervals. "
        "0 retries at the next audit.",
    ),
    cfg.IntOpt(
        "sync_max_attempts",
        default=4,
        min=1,
        max=20,
        help="Attempts to apply the provider tree to Placement when it answers "
        "with a generation conflict, before the sync gives up until the "
        "next audit.",
    ),
    cfg.FloatOpt(
        "sync_retry_delay",
        default=0.2,
        min=0.0,
        help="Upper bound in seconds of the first jittered pause between sync "
        "attempts; it doubles with each attempt (capped at 5 s).",
    ),
    cfg.IntOpt(
        "heal_max_consumers",
        default=100,
        min=1,
        help="Released consumers (instances that left the node) whose "
        "Placement allocations one audit tick looks at (one GET each, one "
        "PUT for each healed). The rest wait for the next tick and are "
        "reported as the healing backlog.",
    ),
    cfg.FloatOpt(
        "heal_max_seconds",
        default=10.0,
        min=0.1,
        help="Seconds one audit tick may spend healing released consumers; "
        "it stops before the next consumer once they are spent, so a mass "
        "delete against a slow Placement never stalls the audit loop.",
    ),
]


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts: an OptGroup holds its options' values
    # and overrides, so sharing the module's one would leak between configs.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
