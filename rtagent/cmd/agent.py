"""``rtagent``: the agent's command line.

    rtagent [--config-file FILE ...] run      audit every audit_interval until SIGTERM
    rtagent [--config-file FILE ...] audit    one audit and sync, then print the node

A configuration or state problem ends the command with one line on stderr
naming what to fix and exit status 2 (no traceback).
"""

import json
import logging as std_logging
import signal
import sys
import threading

from oslo_config import cfg
from oslo_log import log as logging

from rtagent import conf as rtconf
from rtagent import exception
from rtagent.conf import validation
from rtagent.periodic import PeriodicLoop

LOG = logging.getLogger(__name__)

EXIT_CONFIG = 2


def _add_commands(subparsers):
    subparsers.add_parser("run", help="Run the agent until SIGTERM or SIGINT.")
    subparsers.add_parser("audit", help="Run one audit and sync, then print the node.")


def _load_conf(argv):
    conf = rtconf.new_conf()
    logging.register_options(conf)
    # Logs go to stderr so that stdout carries only command output (audit's
    # JSON); under systemd both streams reach the journal anyway.
    conf.set_default("use_stderr", True)
    conf.register_cli_opt(
        cfg.SubCommandOpt("command", title="Commands", handler=_add_commands, help="what to do")
    )
    conf(argv, project="rtagent")
    return conf


def _uri_validator(uri):
    from rtagent.virt.libvirt.uri import validate_uri

    validate_uri(uri)


def _run(conf, agent):
    loop = PeriodicLoop(agent.audit, conf.rtagent.audit_interval)
    # Lifecycle events and connection changes ask for an early, debounced
    # audit instead of waiting for the interval.
    agent.driver.on_change = loop.trigger

    def stop(signum, frame):
        LOG.info("Signal %d received, stopping", signum)
        loop.stop()

    def hangup(signum, frame):
        # Reload arrives with the daemon issue; until then SIGHUP must not
        # take its default action (terminate).
        LOG.warning("SIGHUP received: configuration reload is not supported yet; ignored")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, hangup)
    # The loop runs in a worker so the main thread stays free for signals.
    worker = threading.Thread(target=loop.run, name="audit-loop", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.5)
    LOG.info("Stopped after %d audit(s), %d failed", loop.runs, loop.failures)
    return 0


def _audit(agent):
    result = agent.audit()
    snap = result.snapshot
    report = {
        "node_uuid": snap.node_uuid,
        "hypervisor_hostname": snap.hypervisor_hostname,
        "inventories": {rc: inv.to_placement() for rc, inv in snap.inventories.items()},
        "usage": dict(snap.usage),
        "instances": len(snap.instances),
        "placement_operations": [type(op).__name__ for op in result.sync.operations],
    }
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # Until oslo.log is set up, libraries' log records (keystoneauth's "Could
    # not load ...") would reach stderr beside our one-line error; drop them.
    std_logging.getLogger().addHandler(std_logging.NullHandler())
    try:
        conf = _load_conf(argv)
        validation.validate(conf, uri_validator=_uri_validator)
    except (cfg.Error, exception.RtagentError) as exc:
        print(f"rtagent: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        logging.setup(conf, "rtagent")
    except OSError as exc:
        print(f"rtagent: error: cannot set up logging: {exc}", file=sys.stderr)
        return EXIT_CONFIG

    from rtagent import service

    try:
        agent = service.build_agent(conf)
    except exception.RtagentError as exc:
        print(f"rtagent: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        if conf.command.name == "audit":
            return _audit(agent)
        return _run(conf, agent)
    except exception.RtagentError as exc:
        print(f"rtagent: error: {exc}", file=sys.stderr)
        return 1
    finally:
        agent.close()


if __name__ == "__main__":
    sys.exit(main())
