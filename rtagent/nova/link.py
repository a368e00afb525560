# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The tracker's one way to the agent: the RPC API (docs/rpc-api.md), over
RPC to the rtagent daemon or in the same process.

Both links send the same method names and arguments and get the same reply
envelopes, so the tracker cannot tell them apart and the in-process tests
exercise what production sends over the wire.
"""

import logging

from rtagent.exception import RtagentError
from rtagent.rpc import transport

LOG = logging.getLogger(__name__)


class AgentRefused(Exception):
    """The agent answered with an error envelope.

    :param code: the stable error code (``tracker.compute_resources_unavailable``...).
    :param message: the agent's message.
    :param details: the envelope's ``details`` (docs/rpc-api.md, "Errors").
    """

    def __init__(self, method, code, message, details=None):
        super().__init__(f"{method}: {code}: {message}")
        self.method = method
        self.code = code
        self.message = message
        self.details = details or {}


class AgentUnreachable(Exception):
    """The rtagent daemon did not answer a call: it is down, restarting or
    cut off from the broker (oslo.messaging's timeout or delivery failure,
    kept as ``__cause__``). Whether the call reached it is unknown.
    """

    def __init__(self, method, reason):
        super().__init__(f"{method}: the rtagent daemon did not answer ({reason})")
        self.method = method


def unwrap(method, reply):
    """The ``result`` of a reply envelope.

    :raises AgentRefused: the envelope is an error.
    """
    if reply.get("ok"):
        return reply.get("result")
    error = reply.get("error") or {}
    raise AgentRefused(
        method, error.get("code", "unknown"), error.get("message", ""), error.get("details")
    )


class LocalLink:
    """An agent in this process, called through its RPC endpoint's methods.

    :param agent: the :class:`rtagent.agent.Agent`.
    :param endpoint: an :class:`rtagent.rpc.endpoint.AgentEndpoint` over it.
    :param prompt: the agent's running
        :class:`~rtagent.placement.prompt.PromptSync` (stopped on close),
        or None.
    """

    def __init__(self, agent, endpoint, host_ip, prompt=None):
        self.agent = agent
        self.agent_host_ip = host_ip
        self._endpoint = endpoint
        self.prompt = prompt

    def call(self, method, **args):
        return unwrap(method, getattr(self._endpoint, method)({}, **args))

    def audit(self, nodename=None, reading=None):
        """Run one audit now (read the host, sync Placement). The daemon
        audits on its own; only an embedded agent needs telling.

        :param reading: the ``get_available_resource`` of ``nodename`` the
            caller has just taken; the audit uses it instead of reading
            that node again.
        """
        if reading is not None:
            self.agent.driver.prime(nodename, reading)
        self.agent.audit()

    def publish(self, node_uuid):
        """Sync ``node_uuid`` to Placement now, in the caller's thread (a
        service enabled or disabled: nova's API waits for its trait)."""
        self.agent.sync_changed({node_uuid})

    def resync(self, node_uuid):
        """Sync ``node_uuid`` to Placement again now, in the caller's thread
        (after the periodic's reconciliation told the agent of moves the
        audit's sync did not know). :returns: whether it succeeded; a
        failure is logged."""
        results = self.agent.sync_changed({node_uuid})
        found = results.get(node_uuid)
        return found is not None and not isinstance(found[1], Exception)

    def reread(self, nodename):
        """Read node ``nodename`` through nova's virt driver now, in the
        caller's thread, and have the prompt sync publish it if it changed
        anything (a disk grown since the last periodic): nova's tracker asks
        its driver for the provider tree at each claim. Only the embedded
        agent needs this; it hears no hypervisor events. A failed reading
        is logged; the next periodic reads again."""
        try:
            view = self.agent.driver.read_node(nodename)
        except RtagentError as exc:
            LOG.warning("Reading node %s after a claim failed: %s", nodename, exc)
            return
        changed = self.agent.take_reading([view] if view is not None else [])
        if self.prompt is not None:
            for node_uuid in changed:
                self.prompt.request(node_uuid)

    def close(self):
        if self.prompt is not None and not self.prompt.stop(timeout=10.0):
            LOG.warning("The agent's prompt sync did not stop within 10 s; closing anyway")
        self.agent.close()


# The methods whose repeat returns what the first call did (docs/rpc-api.md,
# "Timeouts, and reading an outcome back": a retried claim returns the same
# claim, a retried abort or move step is harmless; reads change nothing).
# RPC queues are not durable: a broker restarted between a call and its
# reply loses the request or the reply while the call may have run, and
# only sending the same call again learns its outcome. The node counters
# (build_failed, build_succeeded) count each call, and update_instance is
# let go on purpose (ResourceTracker.update_usage): neither is resent.
RESENT = frozenset(
    {
        "instance_claim",
        "abort_instance_claim",
        "start_move",
        "finish_move",
        "confirm_move",
        "revert_move",
        "get_compute_node",
        "get_instance",
        "get_status",
        "ping",
    }
)
# Times an unanswered call of :data:`RESENT` is sent again, each bounded by
# the client's timeout: a call waits at most (1 + RESENDS) x rpc_timeout
# before AgentUnreachable (a broker restart takes seconds; a daemon that is
# down still fails the build, one timeout later than without).
RESENDS = 1


class RpcLink:
    """The rtagent daemon on the same host, over oslo.messaging.

    :param client: an :class:`rtagent.rpc.client.AgentClient`.
    """

    def __init__(self, client):
        self._client = client

    def call(self, method, **args):
        """The call's result; a call of :data:`RESENT` that was not
        answered is sent again (:data:`RESENDS` times, logged).

        :raises AgentRefused: the daemon answered with an error.
        :raises AgentUnreachable: the daemon did not answer.
        """
        om = transport.messaging()
        # Where a call was sent and not answered, this line is the last
        # word of it (a daemon killed mid-call; tests/faults waits for it).
        LOG.debug(
            "Calling %s on the rtagent daemon (instance %s)", method, args.get("instance_uuid")
        )
        resends = RESENDS if method in RESENT else 0
        while True:
            try:
                reply = self._client.call(method, **args)
            except (om.MessagingTimeout, om.MessageDeliveryFailure) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                if not resends:
                    raise AgentUnreachable(method, reason) from exc
                resends -= 1
                LOG.warning(
                    "%s on the rtagent daemon (instance %s) was not answered (%s); "
                    "sent again, as its repeat returns what it did",
                    method,
                    args.get("instance_uuid"),
                    reason,
                )
                continue
            return unwrap(method, reply)

    def audit(self, nodename=None, reading=None):
        """The daemon audits on its own schedule: nothing to do."""

    def publish(self, node_uuid):
        """The daemon's prompt sync publishes a change within a second of
        the call that made it: nothing to do."""

    def resync(self, node_uuid):
        """The daemon syncs on its own: nothing to do."""
        return True

    def reread(self, nodename):
        """The daemon reads its own host (hypervisor events, its audit):
        nothing to do."""

    def close(self):
        """The transport belongs to whoever made the client."""
