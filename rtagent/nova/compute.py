# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""``rtagent-nova-compute``: nova-compute, unchanged, with rtagent as its
resource tracker.

It is nova's own ``nova-compute`` command (same arguments, same nova.conf),
after two changes made before nova builds its ComputeManager:

- nova's ``ResourceTracker`` name points at :mod:`rtagent.nova.resource_tracker`'s,
  whose link is an RPC client of the rtagent daemon on the same host;
- nova's own ResourceTracker is guarded (:mod:`.guard`): constructing or
  calling it raises, so nothing in the process can do accounting or
  Placement reporting behind the agent's back;
- a service enabled or disabled reaches the agent (:mod:`.virtapi`), not
  nova's report client.

nova.conf gains one group, ``[rtagent]``:

- ``agent_config_file``: the rtagent daemon's configuration file. The link
  takes the broker (``transport_url`` and its ``[oslo_messaging_*]``
  groups) and the agent's RPC server name (``host``) from it, so that both
  services agree by construction.
- ``rpc_timeout``: seconds before a call to the agent fails.
"""

import logging
import sys

from oslo_config import cfg

GROUP = "rtagent"
DEFAULT_AGENT_CONFIG = "/etc/rtagent/rtagent.conf"
OPTS = [
    cfg.StrOpt(
        "agent_config_file",
        default=DEFAULT_AGENT_CONFIG,
        help="The rtagent daemon's configuration file: the broker and the agent's "
        "host name the tracker calls are read from it.",
    ),
    cfg.IntOpt(
        "rpc_timeout",
        default=60,
        min=1,
        help="Seconds before a call to the rtagent daemon fails.",
    ),
]

LOG = logging.getLogger(__name__)


class AgentConfigError(Exception):
    """The rtagent daemon's configuration cannot be read."""


def register_opts(conf):
    conf.register_opts(OPTS, group=GROUP)


def agent_rpc_conf(path):
    """The parts of the daemon's configuration file that its RPC clients
    need (``host``, ``transport_url``, oslo.messaging's groups).

    :raises AgentConfigError: the file is missing or invalid.
    """
    from rtagent import conf as rtconf
    from rtagent.rpc import transport

    conf = rtconf.new_conf()
    transport.register_opts(conf)
    try:
        conf(["--config-file", path], project="rtagent", default_config_files=[])
    except (cfg.Error, OSError) as exc:
        raise AgentConfigError(f"[{GROUP}] agent_config_file {path}: {exc}") from exc
    return conf


class DaemonLinks:
    """Links to the rtagent daemon named by ``[rtagent] agent_config_file``
    in ``nova_conf``: :meth:`check` reads that file once nova has parsed its
    own configuration; the transport is made on the first tracker's first
    call. An instance is the ``make_link`` of :func:`install`.
    """

    def __init__(self, nova_conf):
        self._nova_conf = nova_conf
        self._agent_conf = None
        self._transport = None
        self._told = False

    def check(self):
        """Read the daemon's configuration and make the RPC transport it
        names (no connection yet: oslo.messaging connects on first use).

        :raises AgentConfigError: the file cannot be read, or its
            ``transport_url`` names no usable driver or is malformed.
        """
        from rtagent.rpc import transport

        path = self._nova_conf[GROUP].agent_config_file
        agent_conf = agent_rpc_conf(path)
        om = transport.messaging()
        try:
            made = transport.get_transport(agent_conf)
        except (om.InvalidTransportURL, om.DriverLoadFailure) as exc:
            raise AgentConfigError(
                f"[{GROUP}] agent_config_file {path}: transport_url: {exc}"
            ) from exc
        self._agent_conf, self._transport = agent_conf, made

    def __call__(self, host, driver, reportclient):
        from rtagent.nova.link import RpcLink
        from rtagent.rpc.client import AgentClient

        if self._transport is None:
            self.check()
        agent_host = self._agent_conf.host
        if agent_host != host and not self._told:
            LOG.warning(
                "nova-compute's host is %s but the rtagent daemon's is %s; "
                "the tracker calls the daemon by its own name",
                host,
                agent_host,
            )
        if not self._told:
            LOG.info(
                "Resource tracking by the rtagent daemon %s (%s)",
                agent_host,
                self._nova_conf[GROUP].agent_config_file,
            )
            self._told = True
        timeout = self._nova_conf[GROUP].rpc_timeout
        return RpcLink(AgentClient(self._transport, agent_host, timeout=timeout))


def install(make_link):
    """Put rtagent's tracker in place of nova's, for this process, and guard
    nova's own. Returns the tracker class installed."""
    from nova.compute import manager, resource_tracker

    from rtagent.nova import guard, virtapi
    from rtagent.nova import resource_tracker as rt

    nova_tracker = resource_tracker.ResourceTracker
    if issubclass(nova_tracker, rt.RtagentResourceTracker):
        return nova_tracker
    for name, refused in guard.patches(nova_tracker):
        setattr(nova_tracker, name, refused)
    for name, routed in virtapi.patches(manager.ComputeVirtAPI):
        setattr(manager.ComputeVirtAPI, name, routed)
    installed = rt.tracker_class(make_link)
    resource_tracker.ResourceTracker = installed
    return installed


def main():
    # nova's command module first: it sets up nova's concurrency mode
    # (its monkey patching) before anything else is imported.
    try:
        from nova.cmd import compute as nova_compute
    except ImportError as exc:
        sys.exit(f"rtagent-nova-compute needs nova (pip install 'rtagent[nova]'): {exc}")
    from nova import config as nova_config
    from nova.conf import CONF

    register_opts(CONF)
    links = DaemonLinks(CONF)
    parse_args = nova_config.parse_args

    def parse_then_check(argv, *args, **kwargs):
        # A wrong agent_config_file stops the service here, on one line,
        # before it registers itself, not at its first audit.
        parse_args(argv, *args, **kwargs)
        try:
            links.check()
        except AgentConfigError as exc:
            sys.exit(f"rtagent-nova-compute: {exc}")
        # Only now: installing imports nova's compute manager, whose
        # periodic tasks read their spacing (update_resources_interval and
        # the other *_interval options) from CONF when it is imported.
        # Stock nova-compute imports it after parsing nova.conf as well.
        install(links)

    nova_config.parse_args = parse_then_check
    nova_compute.main()
