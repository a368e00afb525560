"""``rtagent``: the agent's command line.

    rtagent [--config-file FILE ...] run      the service: audits, RPC, health (SIGTERM stops)
    rtagent [--config-file FILE ...] audit    one audit and sync, then print the node
    rtagent [--config-file FILE ...] audit --dry-run
                                              the tree it would push and the diff; no writes
    rtagent [--config-file FILE ...] status [--json]
                                              the running agent's view of its nodes
    rtagent [--config-file FILE ...] check-config
                                              every start-up check, and unknown names
    rtagent --version                         the installed version

``run`` and ``audit`` take ``--accept-empty-state``: start with no claims
although the state store this state directory had is missing or empty.

A configuration or state problem ends the command with one line on stderr
naming what to fix and exit status 2 (no traceback).
"""

import json
import logging as std_logging
import sys

from oslo_config import cfg
from oslo_log import log as logging
from oslo_reports import opts as gmr_opts

from rtagent import conf as rtconf
from rtagent import exception
from rtagent.cmd import checks, say_error
from rtagent.cmd.version import startup_line, version_string
from rtagent.conf import daemon as daemon_conf
from rtagent.conf import health as health_conf
from rtagent.conf import validation
from rtagent.logs import escape
from rtagent.rpc import transport

LOG = logging.getLogger(__name__)

EXIT_CONFIG = 2


def _add_commands(subparsers):
    run = subparsers.add_parser("run", help="Run the agent until SIGTERM or SIGINT.")
    audit = subparsers.add_parser("audit", help="Run one audit and sync, then print the node.")
    audit.add_argument(
        "--dry-run",
        action="store_true",
        help="Print the provider tree and the diff against Placement; write nothing.",
    )
    for parser in (run, audit):
        parser.add_argument(
            "--accept-empty-state",
            action="store_true",
            help="Start with no claims although the state store that this state directory "
            "had is missing or empty (see docs/operations.md). Without it, such a start "
            "is refused.",
        )
    status = subparsers.add_parser("status", help="Show the running agent's view of its nodes.")
    status.add_argument("--json", action="store_true", help="Print JSON.")
    subparsers.add_parser(
        "check-config",
        help="Run every start-up check and report unknown options and groups in the "
        "config files; exit 2 with one line per problem.",
    )


def _load_conf(argv):
    conf = rtconf.new_conf()
    logging.register_options(conf)
    # Logs go to stderr so that stdout carries only command output (audit's
    # JSON); under systemd both streams reach the journal anyway.
    conf.set_default("use_stderr", True)
    conf.register_cli_opt(
        cfg.SubCommandOpt("command", title="Commands", handler=_add_commands, help="what to do")
    )
    transport.register_opts(conf)
    gmr_opts.set_defaults(conf)
    conf(argv, project="rtagent", version=version_string())
    return conf


def _validate(conf):
    validation.validate(conf, uri_validator=_uri_validator)
    checks.check_transport_urls(conf)
    # The service's own groups (validation.py reads the agent's).
    for module in (daemon_conf, health_conf):
        for opt in module.ALL_OPTS:
            try:
                conf[module.GROUP.name][opt.dest]
            except (cfg.Error, ValueError) as exc:
                reason = str(exc).split("is not valid: ", 1)[-1]
                raise validation.ConfigError(
                    group=module.GROUP.name, option=opt.dest, reason=f"invalid value: {reason}"
                ) from exc


def _uri_validator(uri):
    from rtagent.virt.libvirt.uri import validate_uri

    validate_uri(uri)


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
        if conf.command.name == "status":
            from rtagent.cmd import status

            checks.check_transport_urls(conf)

            return status.main(conf)
        if conf.command.name == "check-config":
            from rtagent.cmd import check_config

            return check_config.main(
                conf, (_validate, checks.check_host, checks.check_provider_configs)
            )
        _validate(conf)
    except (cfg.Error, exception.RtagentError) as exc:
        say_error(exc)
        return EXIT_CONFIG
    try:
        logging.setup(conf, "rtagent")
    except OSError as exc:
        say_error(f"cannot set up logging: {exc}")
        return EXIT_CONFIG
    # Alias names, spec values and libvirt's texts reach log messages:
    # no raw newline, ESC or bidirectional control in a log line.
    escape.install()
    try:
        # After logging: a hypervisor that does not answer is a warning.
        checks.check_host(conf)
    except exception.RtagentError as exc:
        say_error(exc)
        return EXIT_CONFIG
    from rtagent.cmd import check_config

    for problem in check_config.unknown_names(conf):
        LOG.warning("%s; ignored (rtagent check-config lists them all)", problem)

    return _dispatch(conf, argv)


def _dispatch(conf, argv):
    if conf.command.name == "run":
        return _run(conf, argv)
    from rtagent.service import builder

    try:
        agent = builder.build_agent(conf)
    except exception.RtagentError as exc:
        say_error(exc)
        return EXIT_CONFIG
    command = "audit --dry-run" if conf.command.dry_run else "audit"
    LOG.info("%s", startup_line(conf, agent, command))
    try:
        if conf.command.dry_run:
            return _dry_run(agent)
        return _audit(agent)
    except exception.RtagentError as exc:
        say_error(exc)
        return 1
    finally:
        agent.close()


def _dry_run(agent):
    """Print each node's desired provider tree and the operations a sync
    would send; nothing is written to Placement."""
    report = []
    for snapshot, desired, ops in agent.plan():
        report.append(
            {
                "node_uuid": snapshot.node_uuid,
                "hypervisor_hostname": snapshot.hypervisor_hostname,
                "desired": [
                    {
                        "uuid": p.uuid,
                        "name": p.name,
                        "parent_uuid": p.parent_uuid,
                        "inventories": {
                            rc: inv.to_placement() for rc, inv in sorted(p.inventories.items())
                        },
                        "traits": sorted(p.traits),
                    }
                    for p in desired
                ],
                "operations": [_describe_op(op) for op in ops],
            }
        )
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def _describe_op(op):
    described = {"op": type(op).__name__, "uuid": op.uuid}
    for field in ("name", "inventories", "traits"):
        value = getattr(op, field, None)
        if value is not None:
            described[field] = sorted(value) if isinstance(value, frozenset) else value
    return described


def _run(conf, argv):
    from rtagent.cmd import run

    def reload_conf():
        # A fresh ConfigOpts over the same files, checked whole: a broken
        # file is rejected before anything changes. The host checks too:
        # a CPU set the start-up would refuse (a bad item, CPUs not
        # online) must not be "reloaded" and then stop the next start.
        new = _load_conf(argv)
        _validate(new)
        checks.check_host(new)
        return new

    try:
        return run.build_and_run(conf, reload_conf)
    except exception.RtagentError as exc:
        say_error(exc)
        return EXIT_CONFIG


if __name__ == "__main__":
    sys.exit(main())
