"""``rtagent run``: assemble the daemon from configuration and run it."""

import dataclasses
import logging
import signal

from rtagent.cmd.version import startup_line, version_string
from rtagent.conf.validation import ConfigError
from rtagent.logs import escape
from rtagent.rpc import notifications as notificationsmod
from rtagent.rpc import transport
from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.rpc.server import RPCServer
from rtagent.service import builder, daemon, health, periodic, prometheus, systemd
from rtagent.service.wakeup import Wakeup
from rtagent.virt import hugepages

LOG = logging.getLogger(__name__)


def build_and_run(conf, reload_conf):
    """Build the agent and its daemon, install signal handlers, run.

    :param reload_conf: callable() -> a new validated ConfigOpts (SIGHUP).
    :returns: the exit status.
    :raises RtagentError: the agent could not be built (exit 2 upstream).
    """
    # Built in dependency order: what the agent reports to (metrics) and
    # what its hypervisor events pull (the loop's trigger) exist first.
    meter = prometheus.Metrics()
    trigger = periodic.Trigger()
    agent = builder.build_agent(conf, observer=meter.observer(), on_change=trigger.pull)
    LOG.info("%s", startup_line(conf, agent, "run"))
    # What signal handlers wake; installed before the daemon runs.
    wakeup = Wakeup()
    rpc_transport = notify_transport = None
    try:
        notifications = None
        if conf.transport_url:
            rpc_transport = transport.get_transport(conf)
        else:
            # oslo.messaging would fall back to a broker on localhost and
            # block start-up until one answers; say what is off instead.
            LOG.warning("No [DEFAULT] transport_url: RPC and notifications are off")
        if conf.transport_url and conf.daemon.notifications:
            notify_transport = transport.get_notification_transport(conf)
            notifications = notificationsmod.Notifications(
                notificationsmod.oslo_sender(notify_transport, conf.host),
                agent,
                conf.host,
                conf.my_ip,
                interval=conf.daemon.instance_info_interval,
            )

        def make_endpoint(**hooks):
            return AgentEndpoint(agent, conf.host, conf.my_ip, **hooks)

        def make_health(check, status):
            host, port = conf.health.bind_address, conf.health.port
            try:
                return health.HealthServer(check, meter, status, port, host=host)
            except OSError as exc:
                # Another service on the port, or an address not on this
                # host: the operator's to fix, said in one line (exit 2).
                raise ConfigError(
                    group="health",
                    option="port",
                    reason=f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                ) from None

        the_daemon = daemon.Daemon(
            conf,
            agent,
            metrics=meter,
            notifier=systemd.Notifier(),
            make_rpc=(
                (lambda endpoint: RPCServer(rpc_transport, conf.host, endpoint))
                if rpc_transport is not None
                else None
            ),
            make_endpoint=make_endpoint,
            notifications=notifications,
            health=make_health if conf.health.enabled else None,
            reload=reload_conf,
            apply_conf=lambda new: apply_conf(conf, new, agent),
            store=agent.store,
            report=_guru_meditation(conf),
            trigger=trigger,
            wakeup=wakeup,
        )
        _install_signals(wakeup)
        return the_daemon.run()
    finally:
        for t in (rpc_transport, notify_transport):
            if t is not None:
                t.cleanup()


def apply_conf(conf, new, agent):
    """Apply a reloaded configuration: ratios and reserved amounts, log
    levels, provider config files; drop the cached Placement view so the
    next audit re-reads it."""
    # reserved_huge_pages needs a restart, like the CPU sets: the host
    # driver checks the value it started with against the NUMA cells.
    policy = dataclasses.replace(
        builder.policy_from_conf(new),
        reserved_huge_pages=hugepages.parse(conf.reserved_huge_pages),
    )
    # Log levels: oslo.log's mutate hook applies [DEFAULT] debug, and
    # re-reads a changed log_config_append: its new handlers escape too.
    conf.mutate_config_files()
    if getattr(conf, "log_config_append", None):
        escape.install()
    for tracker in agent.nodes.trackers():
        tracker.set_policy(policy)
    agent.reload_provider_config(new)
    agent.invalidate_placement_cache()
    LOG.info(
        "Applied: reserved cpus=%d memory=%d MiB disk=%d MiB; ratios %s",
        policy.reserved_host_cpus,
        policy.reserved_host_memory_mb,
        policy.reserved_host_disk_mb,
        dict(policy.ratios),
    )


def _install_signals(wakeup):
    """Handlers that only record the request and wake the main thread.

    They run in the main thread between any two bytecodes, also while it
    holds a lock (an Event's, a log handler's): a handler that took a lock
    or logged could deadlock it. The daemon acts in ordinary code instead.
    ``set_wakeup_fd`` wakes the main thread's select even when the kernel
    delivers the signal to another thread.
    """

    def stop(signum, frame):
        wakeup.request_stop(signum)

    def hangup(signum, frame):
        wakeup.request_reload()

    def report(signum, frame):
        wakeup.request_report()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hangup)
    signal.signal(signal.SIGUSR2, report)
    signal.set_wakeup_fd(wakeup.fd, warn_on_full_buffer=False)


def _guru_meditation(conf):
    """SIGUSR2's report: a Guru Meditation Report (threads, stacks,
    configuration) to stderr, or a file in ``[oslo_reports] log_dir``.

    oslo.reports' own SIGUSR2 handler writes the report inside the handler;
    ours only asks the daemon, whose main thread calls the function returned
    here. ``[oslo_reports] file_event_handler`` keeps working (oslo.reports
    watches that file from a thread of its own).
    """
    from rtagent.service import guru

    version = _Version(version_string())
    # rtagent's configuration, not oslo.config's global one (rtagent.service.guru).
    gmr = guru.report_class(conf)
    gmr.setup_autorun(version, conf=conf, setup_signal=False)
    log_dir = conf.oslo_reports.log_dir

    def report():
        gmr.handle_signal(version, "rtagent", log_dir, None)

    return report


class _Version:
    """What oslo.reports asks of a version object."""

    def __init__(self, version):
        self._version = version

    def vendor_string(self):
        return "OpenStack"

    def product_string(self):
        return "rtagent"

    def version_string_with_package(self):
        return self._version
