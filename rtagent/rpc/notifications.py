"""Notifications for schedulers: the compute-node view when it changes, host
metrics when there is a new reading, and instance info (what is on this
host) when it changes and periodically.

Event types (payloads are plain JSON)::

    rtagent.compute_node.update   {"compute_node": <get_compute_node's result>}
    rtagent.metrics.update        {"host", "host_ip", "nodename", "node_uuid",
                                   "metrics": [...]}  (nova's compute.metrics.update)
    rtagent.instance_info.update  {"host", "node_uuid", "instance_uuids": [...]}
    rtagent.instance_info.sync    the same, sent every instance_info_interval

Publishing runs in its own thread: an RPC call or an audit only pokes it,
so a slow broker never delays a claim. A burst of pokes costs one pass.
"""

import logging
import threading
import time

from rtagent.rpc import transport

LOG = logging.getLogger(__name__)

# Fields that change on every read and say nothing about the node's
# resources. Host metrics change with every audit's reading; they have their
# own event, so they alone do not resend the view.
_VOLATILE = ("updated_at", "metrics")


class Notifications:
    """:param send: callable(event_type, payload); see :func:`oslo_sender`.
    :param agent: the :class:`rtagent.agent.Agent`.
    :param interval: seconds between periodic instance-info syncs.
    """

    def __init__(self, send, agent, host, host_ip, *, interval, clock=time.monotonic):
        self._send = send
        self._agent = agent
        self._host = host
        self._host_ip = host_ip
        self._interval = interval
        self._clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._views = {}
        self._metrics = {}
        self._instances = {}
        self._last_sync = None
        self._thread = None
        self.sent = 0
        self.failures = 0

    def poke(self, node_uuid=None):
        """Something may have changed: send soon. Never blocks."""
        self._wake.set()

    def start(self):
        self._thread = threading.Thread(target=self._run, name="notifications", daemon=True)
        self._thread.start()

    def stop(self, timeout=5.0):
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self):
        while not self._stop.is_set():
            self.send_once()
            due = self._interval - (self._clock() - self._last_sync)
            self._wake.wait(max(0.0, due))
            self._wake.clear()

    def send_once(self):
        """Send what changed since the last pass (and the periodic sync)."""
        periodic = self._last_sync is None or self._clock() - self._last_sync >= self._interval
        if periodic:
            self._last_sync = self._clock()
        for tracker in self._agent.nodes.trackers():
            try:
                self._send_node(tracker, periodic)
            except Exception:
                # Notifications are best effort; the next pass retries.
                self.failures += 1
                LOG.exception("Notifications for node %s failed", tracker.node_uuid)

    def _send_node(self, tracker, periodic):
        snap = tracker.snapshot()
        if snap.host is None:
            return  # not audited yet: nothing true to say
        node = snap.node_uuid
        view = tracker.compute_node_view(self._host_ip)
        stable = {k: v for k, v in view.items() if k not in _VOLATILE}
        if self._views.get(node) != stable:
            self._emit("rtagent.compute_node.update", {"compute_node": view})
            self._views[node] = stable
        metrics = view.get("metrics")
        if metrics and self._metrics.get(node) != metrics:
            # Once per reading (each has its own timestamp), as nova sends
            # compute.metrics.update once per audit; none while there are none.
            payload = {
                "host": self._host,
                "host_ip": self._host_ip,
                "nodename": view["hypervisor_hostname"],
                "node_uuid": node,
                "metrics": metrics,
            }
            self._emit("rtagent.metrics.update", payload)
            self._metrics[node] = metrics
        uuids = sorted(i.uuid for i in snap.instances)
        if self._instances.get(node) != uuids or periodic:
            event = "rtagent.instance_info.update"
            if self._instances.get(node) == uuids:
                event = "rtagent.instance_info.sync"
            payload = {"host": self._host, "node_uuid": node, "instance_uuids": uuids}
            self._emit(event, payload)
            self._instances[node] = uuids

    def _emit(self, event_type, payload):
        self._send(event_type, payload)
        self.sent += 1


def oslo_sender(notification_transport, host):
    """A send(event_type, payload) over oslo.messaging's messagingv2 driver."""
    om = transport.messaging()
    from oslo_context import context

    notifier = om.Notifier(
        notification_transport,
        publisher_id=f"rtagent.{host}",
        driver="messagingv2",
        topics=[transport.NOTIFICATION_TOPIC],
    )

    def send(event_type, payload):
        # A plain dict context is dropped by the notifier: it needs a
        # RequestContext.
        notifier.info(context.RequestContext(), event_type, payload)

    return send
