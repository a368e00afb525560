"""[health]: the HTTP endpoint for /healthz, /status and Prometheus /metrics."""

from oslo_config import cfg

GROUP = cfg.OptGroup("health", title="Health check and metrics endpoint")

# 8779, the first default, is Trove's API port. Among the service ports
# kolla-ansible lists, OpenStack's APIs take 5000, 6080-6083, 6385,
# 8000-8004, 8041-8042, 8386, 8774-8780, 8786, 8799, 8889, 8977, 8989, 8999,
# 9001, 9292, 9311, 9322, 9511, 9517, 9696, 9876 and 9890, and 9100-9999 is
# the Prometheus exporters' range (node, libvirt, openstack exporters on
# compute hosts); 8787 is in neither.
DEFAULT_PORT = 8787

ALL_OPTS = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="Serve /healthz, /status and /metrics over HTTP.",
    ),
    cfg.PortOpt(
        "port",
        default=DEFAULT_PORT,
        help="TCP port for /healthz, /status and /metrics. The default is no "
        "OpenStack service's default port.",
    ),
    cfg.IPOpt(
        "bind_address",
        default="127.0.0.1",
        help="Address the endpoint listens on. The default keeps it on the "
        "host (the local monitoring agent, `rtagent status`). To let a "
        "central Prometheus scrape /metrics, set 0.0.0.0 (or :: for IPv6 "
        "as well) and allow only the Prometheus server through the host's "
        "firewall: /status and /healthz then answer on that address too. "
        "`rtagent status` asks this address (127.0.0.1 for 0.0.0.0 and ::).",
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
