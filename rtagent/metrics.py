"""Prometheus metrics of one agent, in a private registry.

Counters and histograms are updated where things happen (RPC calls, audit
ticks, Placement requests); gauges of the node's state are read from fresh
snapshots at scrape time, so they are never stale.
"""

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from rtagent.placement.client import RequestObserver

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The agent's counters, and (once :meth:`watch` is called by the
    service that owns the state) gauges of the nodes' state.

    Made before the agent, because the agent's Placement client reports to
    :meth:`observer` from its construction on.
    """

    def __init__(self, wall=time.time):
        self._wall = wall
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpc_calls = Counter(
            "rtagent_rpc_calls",
            "RPC calls served, by method and error code.",
            ["method", "code"],
            registry=r,
        )
        self.rpc_seconds = Histogram(
            "rtagent_rpc_call_seconds",
            "Time to serve an RPC call.",
            ["method"],
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
        )
        self.claims = Counter(
            "rtagent_claims",
            "Instance claims by outcome (granted or the error code).",
            ["outcome"],
            registry=r,
        )
        self.audits = Counter(
            "rtagent_audits",
            "Audit ticks by outcome (ok or the error code).",
            ["outcome"],
            registry=r,
        )
        self.audit_seconds = Histogram(
            "rtagent_audit_seconds",
            "Duration of an audit tick (host read and sync).",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )
        self.placement_requests = Counter(
            "rtagent_placement_requests",
            "Placement requests by method and HTTP status.",
            ["method", "status"],
            registry=r,
        )
        self.placement_conflicts = Counter(
            "rtagent_placement_conflicts",
            "Placement answers 409 (generation conflicts).",
            registry=r,
        )
        self.placement_retries = Counter(
            "rtagent_placement_retries",
            "Placement requests sent again because their connection was lost "
            "before an answer (e.g. a stale keep-alive connection).",
            ["method"],
            registry=r,
        )

    def watch(self, trackers, sync_state):
        """Export the nodes' state, read at scrape time.

        :param trackers: callable() -> the node trackers (state gauges).
        :param sync_state: callable() -> dict with ``last_success`` (wall
            seconds or None), ``unknown_consumers`` and ``healing_backlog``
            ({node: count}).
        """
        self.registry.register(_StateCollector(trackers, sync_state, self._wall))

    def record_rpc(self, method, code, seconds):
        self.rpc_calls.labels(method, code or "ok").inc()
        self.rpc_seconds.labels(method).observe(seconds)
        if method == "instance_claim":
            self.claims.labels(code or "granted").inc()

    def record_audit(self, code, seconds):
        self.audits.labels(code or "ok").inc()
        self.audit_seconds.observe(seconds)

    def observer(self):
        """A Placement RequestObserver feeding the request counters."""
        return _PlacementObserver(self)

    def render(self):
        return generate_latest(self.registry)


class _PlacementObserver(RequestObserver):
    def __init__(self, metrics):
        self._m = metrics

    def after(self, method, url, status, seconds):
        self._m.placement_requests.labels(method, str(status) if status else "error").inc()
        if status == 409:
            self._m.placement_conflicts.inc()

    def retried(self, method, url, reason):
        self._m.placement_retries.labels(method).inc()


class _StateCollector:
    def __init__(self, trackers, sync_state, wall):
        self._trackers = trackers
        self._sync_state = sync_state
        self._wall = wall

    def describe(self):
        return []

    def collect(self):
        labels = ["node"]
        capacity = GaugeMetricFamily(
            "rtagent_resource_capacity",
            "Allocatable amount per resource class.",
            labels=[*labels, "resource_class"],
        )
        used = GaugeMetricFamily(
            "rtagent_resource_used",
            "Used amount per resource class.",
            labels=[*labels, "resource_class"],
        )
        instances = GaugeMetricFamily("rtagent_instances", "Tracked instances.", labels=labels)
        untracked = GaugeMetricFamily(
            "rtagent_drift_untracked_domains",
            "Domains on the host without a claim.",
            labels=labels,
        )
        missing = GaugeMetricFamily(
            "rtagent_drift_missing_instances",
            "Tracked instances without a domain.",
            labels=labels,
        )
        released = GaugeMetricFamily(
            "rtagent_released_consumers",
            "Instances that left the node whose allocations are not healed yet.",
            labels=labels,
        )
        for tracker in self._trackers():
            snap = tracker.snapshot()
            node = snap.node_uuid
            for rc, inv in snap.inventories.items():
                capacity.add_metric([node, rc], inv.capacity)
                used.add_metric([node, rc], snap.usage.get(rc, 0))
            instances.add_metric([node], len(snap.instances))
            untracked.add_metric([node], len(snap.drift.untracked) if snap.drift else 0)
            missing.add_metric([node], len(snap.drift.missing) if snap.drift else 0)
            released.add_metric([node], len(snap.released))
        yield from (capacity, used, instances, untracked, missing, released)
        last = self._sync_state().get("last_success")
        lag = GaugeMetricFamily(
            "rtagent_sync_lag_seconds",
            "Seconds since the last successful Placement sync (-1: none yet).",
        )
        lag.add_metric([], self._wall() - last if last else -1)
        yield lag
        unknown = GaugeMetricFamily(
            "rtagent_unknown_consumers",
            "Consumers holding allocations on the node's providers that the agent "
            "does not know (reported, never deleted).",
            labels=["node"],
        )
        state = self._sync_state()
        for node, count in (state.get("unknown_consumers") or {}).items():
            unknown.add_metric([node], count)
        yield unknown
        backlog = GaugeMetricFamily(
            "rtagent_healing_backlog",
            "Released consumers the last healing pass left for a later one "
            "(its per-tick budget was spent).",
            labels=["node"],
        )
        for node, count in (state.get("healing_backlog") or {}).items():
            backlog.add_metric([node], count)
        yield backlog
