"""[daemon]: the service around the agent (loop timing, shutdown,
notifications)."""

from oslo_config import cfg

GROUP = cfg.OptGroup("daemon", title="rtagent service options")

ALL_OPTS = [
    cfg.FloatOpt(
        "audit_jitter",
        default=0.1,
        min=0.0,
        max=0.5,
        help="Each wait between audits is audit_interval times a random factor "
        "in [1 - audit_jitter, 1 + audit_jitter], so agents started together "
        "drift apart instead of ticking in unison.",
    ),
    cfg.FloatOpt(
        "startup_delay",
        default=10.0,
        min=0.0,
        help="Upper bound in seconds of a random delay before the first audit "
        "(and so before RPC calls are taken), so that a fleet restarted at "
        "once does not hit Placement in the same second. 0 disables it.",
    ),
    cfg.FloatOpt(
        "shutdown_timeout",
        default=30.0,
        min=1.0,
        help="On SIGTERM: seconds allowed for the RPC calls in flight and the "
        "final Placement flush; the process exits 0 after at most this long "
        "plus a few seconds. Keep systemd's TimeoutStopSec above it.",
    ),
    cfg.FloatOpt(
        "watchdog_stall",
        default=900.0,
        min=10.0,
        help="An audit running longer than this many seconds counts as a "
        "stalled loop: systemd watchdog pings stop (systemd then restarts "
        "the service) and /healthz answers 503.",
    ),
    cfg.BoolOpt(
        "notifications",
        default=True,
        help="Send notifications (compute-node view and instance info) on the "
        "notification transport (oslo_messaging_notifications).",
    ),
    cfg.IntOpt(
        "instance_info_interval",
        default=300,
        min=10,
        help="Seconds between periodic instance-info notifications (they are "
        "also sent whenever the set of instances changes).",
    ),
]


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts (an OptGroup holds option state).
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
