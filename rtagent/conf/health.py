"""[health]: the loopback HTTP endpoint for /healthz and Prometheus /metrics."""

from oslo_config import cfg

GROUP = cfg.OptGroup("health", title="Health check and metrics endpoint")

ALL_OPTS = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="Serve /healthz and /metrics over HTTP on 127.0.0.1.",
    ),
    cfg.PortOpt(
        "port",
        default=8779,
        help="TCP port on 127.0.0.1 for /healthz and /metrics.",
    ),
    cfg.FloatOpt(
        "sync_stale_after",
        default=600.0,
        min=1.0,
        help="/healthz reports Placement as out of sync (503) when the last "
        "sync attempt failed, or when no sync succeeded for this many seconds.",
    ),
]


def register_opts(conf):
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
