"""Prometheus metrics of one agent, in a private registry.

Counters and histograms are updated where things happen (RPC calls, audit
ticks, Placement requests); gauges of the node's state are read from fresh
snapshots at scrape time, so they are never stale.
"""

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from rtagent.placement.client import RequestObserver

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# nova's host CPU metric names -> the ``kind`` label of the host CPU families.
_CPU_PERCENT_KINDS = {
    "cpu.user.percent": "user",
    "cpu.kernel.percent": "kernel",
    "cpu.idle.percent": "idle",
    "cpu.iowait.percent": "iowait",
    "cpu.percent": "used",  # user + kernel + iowait
}
_CPU_TIME_KINDS = {
    "cpu.user.time": "user",
    "cpu.kernel.time": "kernel",
    "cpu.idle.time": "idle",
    "cpu.iowait.time": "iowait",
}


class Metrics:
    """The agent's counters, and (once :meth:`watch` is called by the
    service that owns the state) gauges of the nodes' state.

    Made before the agent, because the agent's Placement client reports to
    :meth:`observer` from its construction on.
    """

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # process_cpu_seconds_total, process_resident_memory_bytes,
        # process_open_fds, process_start_time_seconds... (from /proc).
        ProcessCollector(registry=r)
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
            "Audit ticks by outcome: ok or the failure's code (a tick whose sync "
            "backs off counts under the code of the failure it backs off from).",
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
        :param sync_state: callable() -> dict with ``node_last_success``
            ({node: wall seconds or None}), ``unknown_consumers`` and
            ``healing_backlog`` ({node: count}).
        """
        self.registry.register(_StateCollector(trackers, sync_state))

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
    """Gauges of the nodes, labelled ``node`` (the UUID, which Placement
    and nova know) and ``hostname`` (the hypervisor's name, which people
    know; empty until the host was first read)."""

    LABELS = ("node", "hostname")

    def __init__(self, trackers, sync_state):
        self._trackers = trackers
        self._sync_state = sync_state

    def describe(self):
        return []

    def collect(self):
        labels = list(self.LABELS)

        def gauge(name, doc, extra=()):
            return GaugeMetricFamily(name, doc, labels=[*labels, *extra])

        capacity = gauge(
            "rtagent_resource_capacity",
            "Allocatable amount per resource class.",
            ["resource_class"],
        )
        used = gauge("rtagent_resource_used", "Used amount per resource class.", ["resource_class"])
        instances = gauge("rtagent_instances", "Tracked instances.")
        untracked = gauge("rtagent_drift_untracked_domains", "Domains on the host without a claim.")
        missing = gauge("rtagent_drift_missing_instances", "Tracked instances without a domain.")
        released = gauge(
            "rtagent_released_consumers",
            "Instances that left the node whose allocations are not healed yet.",
        )
        frequency = gauge(
            "rtagent_host_cpu_frequency_mhz",
            "Host CPU frequency in MHz at the last audit (nova's cpu.frequency; "
            "absent unless [DEFAULT] compute_monitors is on).",
        )
        percent = gauge(
            "rtagent_host_cpu_percent",
            "Share of host CPU time by kind between the last two audits, integer "
            "percent (nova's cpu.*percent; used = user + kernel + iowait).",
            ["kind"],
        )
        cpu_time = CounterMetricFamily(
            "rtagent_host_cpu_time_seconds",
            "Host CPU time by kind since boot, all CPUs (nova's cpu.*.time).",
            labels=[*labels, "kind"],
        )
        hostnames = {}
        for tracker in self._trackers():
            snap = tracker.snapshot()
            node = snap.node_uuid
            hostnames[node] = snap.hypervisor_hostname or ""
            ids = [node, hostnames[node]]
            for rc, inv in snap.inventories.items():
                capacity.add_metric([*ids, rc], inv.capacity)
                used.add_metric([*ids, rc], snap.usage.get(rc, 0))
            instances.add_metric(ids, len(snap.instances))
            untracked.add_metric(ids, len(snap.drift.untracked) if snap.drift else 0)
            missing.add_metric(ids, len(snap.drift.missing) if snap.drift else 0)
            released.add_metric(ids, len(snap.released))
            host_metrics = getattr(tracker, "host_metrics", tuple)
            for metric in host_metrics():
                if metric.name == "cpu.frequency":
                    frequency.add_metric(ids, metric.value)
                elif metric.name in _CPU_PERCENT_KINDS:
                    percent.add_metric([*ids, _CPU_PERCENT_KINDS[metric.name]], metric.value)
                elif metric.name in _CPU_TIME_KINDS:
                    cpu_time.add_metric([*ids, _CPU_TIME_KINDS[metric.name]], metric.value / 1e9)
        yield from (capacity, used, instances, untracked, missing, released)
        yield from (frequency, percent, cpu_time)

        state = self._sync_state()

        def per_node(family, values):
            for node, value in (values or {}).items():
                if value is not None:
                    family.add_metric([node, hostnames.get(node, "")], value)
            return family

        # A timestamp, not an age: no sentinel is needed before the first
        # success (the sample is absent), and alerts compute the age with
        # time() - rtagent_sync_last_success_timestamp_seconds.
        yield per_node(
            gauge(
                "rtagent_sync_last_success_timestamp_seconds",
                "Unix time of the node's last successful Placement sync (absent until the first).",
            ),
            state.get("node_last_success"),
        )
        yield per_node(
            gauge(
                "rtagent_unknown_consumers",
                "Consumers holding allocations on the node's providers that the agent "
                "does not know (reported, never deleted).",
            ),
            state.get("unknown_consumers"),
        )
        yield per_node(
            gauge(
                "rtagent_healing_backlog",
                "Released consumers the last healing pass left for a later one "
                "(its per-tick budget was spent).",
            ),
            state.get("healing_backlog"),
        )
