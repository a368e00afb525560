"""One audit: read the host, account under the lock, publish outside it.

This is the whole data path of a tick, in the order that keeps every
tracker lock free of I/O:

1. ``driver.read_nodes()``          hypervisor calls, no lock held;
2. ``tracker.update_host(view)``     per node, lock held: memory only;
3. ``desired_tree(snapshot)``        pure, then merged with provider configs;
4. ``sync.sync(desired)``            per node, Placement calls, no lock held;
5. ``tracker.set_placement_ratios``  lock held: memory and one local write;
6. healing of released consumers     Placement calls, no lock held.
"""

import dataclasses
import logging
import threading
import time

from rtagent import exception
from rtagent.placement import allocations, standalone
from rtagent.placement import errors as placement_errors
from rtagent.placement.desired import desired_tree
from rtagent.placement.health import SyncHealth
from rtagent.virt.errors import HypervisorUnavailable

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """:param snapshot, sync: the primary node's snapshot and sync result
        (None while its sync backs off after failures).
    :param nodes: node UUID -> (snapshot, sync result, None, or the error).
    """

    snapshot: object
    sync: object
    seconds: float
    nodes: dict = dataclasses.field(default_factory=dict)


class Agent:
    """Ties a host driver, the node trackers and the Placement sync together.

    Claims go straight to a tracker (``agent.tracker`` for the primary
    node, ``agent.nodes.get(uuid)`` for others); they never wait for an
    audit's I/O.

    :param nodes: a :class:`rtagent.tracker.nodes.NodeSet`.
    :param make_sync: callable() -> ProviderSync, one per node's tree.
    :param client: the PlacementClient, for healing and standalone claims.
    :param provider_configs: a ProviderConfigSource, or None.
    :param make_health: callable() -> SyncHealth (its backoff), per node.
    """

    def __init__(
        self,
        driver,
        nodes,
        make_sync,
        *,
        store=None,
        client=None,
        provider_configs=None,
        make_health=SyncHealth,
        clock=time.monotonic,
    ):
        self.driver = driver
        self.nodes = nodes
        self.provider_configs = provider_configs
        # node -> the consumers found unknown at the last check, and the
        # root generation that check saw (checked again when it moves).
        self._unknown_seen, self._unknown_gen = {}, {}
        self._reports = {}
        self._make_sync = make_sync
        self._make_health = make_health
        self._client = client
        self._store = store
        self._clock = clock
        self._syncs, self._health, self._healers = {}, {}, {}
        # The audit thread owns the syncs and their caches. Other threads
        # (signals, RPC, HTTP status) only read copies under this mutex, or
        # leave requests that the next audit applies in its own thread.
        self._mutex = threading.Lock()
        self._pending_invalidate = False
        self._pending_config_location = None

    @property
    def tracker(self):
        """The primary node's tracker."""
        return self.nodes.primary

    @property
    def sync(self):
        """The primary node's Placement sync."""
        return self._sync_for(self.nodes.primary_uuid)

    def _sync_for(self, node_uuid):
        with self._mutex:
            if node_uuid not in self._syncs:
                self._syncs[node_uuid] = self._make_sync()
                self._health[node_uuid] = self._make_health()
            return self._syncs[node_uuid]

    def audit(self):
        """Run one audit tick over every node.

        A failing node does not stop the others; the first error is raised
        after all nodes were tried. A node whose sync failed is retried
        with a jittered backoff (no request until it is due).

        :raises rtagent.virt.errors.VirtError: the host could not be read;
            claims are refused until it can.
        :raises rtagent.placement.errors.PlacementError: a sync failed;
            local accounting is up to date and a later tick retries.
        """
        started = self._clock()
        self._apply_requests()
        try:
            views = self.driver.read_nodes()
        except HypervisorUnavailable as exc:
            # Claims checked against a host we cannot see could oversubscribe
            # it; refuse them until the next successful read.
            for tracker in self.nodes.trackers():
                tracker.mark_host_unavailable(exc)
            raise
        results, errors = {}, []
        for tracker, snapshot, desired in self._desired(views):
            try:
                outcome = self._publish(tracker, snapshot, desired)
            except exception.RtagentError as exc:
                LOG.warning("Sync of node %s failed: %s", snapshot.node_uuid, exc)
                errors.append(exc)
                outcome = exc
            results[snapshot.node_uuid] = (snapshot, outcome)
        with self._mutex:
            for gone in self.nodes.removed:
                self._syncs.pop(gone, None)
                self._health.pop(gone, None)
                self._healers.pop(gone, None)
        if errors:
            raise errors[0]
        primary = results.get(self.nodes.primary_uuid) or next(iter(results.values()))
        return AuditResult(primary[0], primary[1], self._clock() - started, results)

    def _desired(self, views):
        """(tracker, snapshot, desired tree) per node, configs merged in."""
        managed = self.driver.managed_traits
        pending = []
        for tracker, view in self.nodes.assign(views):
            snapshot = tracker.update_host(view)
            desired = desired_tree(
                snapshot,
                driver_traits=getattr(view, "traits", frozenset()),
                managed_traits=managed,
            )
            pending.append((tracker, snapshot, desired))
        if self.provider_configs is not None:
            merged = self.provider_configs.apply_all({s.node_uuid: d for _, s, d in pending})
            pending = [(t, s, merged[s.node_uuid]) for t, s, _ in pending]
        return pending

    def _publish(self, tracker, snapshot, desired):
        """Sync one node's tree, then heal its released consumers."""
        node = snapshot.node_uuid
        sync = self._sync_for(node)
        health = self._health[node]
        if not health.due():
            # No request now, but the node is still out of sync: say so, so
            # that health and status never read a skipped tick as a success.
            status = health.status()
            raise placement_errors.SyncBackingOff(
                node=node, retry_in=status.retry_in, last_error=status.last_error
            )
        try:
            outcome = sync.sync(desired)
            tracker.set_placement_ratios(sync.placement_ratios(node))
            self._heal(tracker, snapshot, desired)
            self._check_unknown(node, sync)
        except placement_errors.PlacementError as exc:
            health.record_failure(exc)
            raise
        health.record_success()
        return outcome

    def _heal(self, tracker, snapshot, desired):
        if not snapshot.released or self._client is None:
            return
        healer = self._healers.setdefault(
            snapshot.node_uuid, allocations.AllocationHealer(self._client)
        )
        result = healer.heal(
            snapshot.released,
            [p.uuid for p in desired],
            still_released=lambda consumer: consumer in tracker.snapshot().released,
        )
        if result.healed:
            tracker.forget_released(result.healed)

    def plan(self):
        """A dry run of one audit: read the host, and for every node the
        desired tree and the operations a sync would send. Reads Placement,
        writes nothing there. :returns: list of (snapshot, desired, ops)."""
        planned = []
        for _tracker, snapshot, desired in self._desired(self.driver.read_nodes()):
            planned.append((snapshot, desired, self._sync_for(snapshot.node_uuid).plan(desired)))
        return planned

    def invalidate_placement_cache(self):
        """Forget every node's cached Placement view. Safe from any thread:
        the next audit does it, in the audit thread."""
        with self._mutex:
            self._pending_invalidate = True

    def reload_provider_config(self, conf):
        """Re-read provider config files at the next audit (SIGHUP). Safe
        from any thread. A bad file keeps the last good configuration."""
        with self._mutex:
            self._pending_config_location = conf.compute.provider_config_location

    def _apply_requests(self):
        """Apply what other threads asked for, in the audit thread."""
        with self._mutex:
            invalidate, self._pending_invalidate = self._pending_invalidate, False
            location, self._pending_config_location = self._pending_config_location, None
            syncs = list(self._syncs.values())
        if location is not None and self.provider_configs is not None:
            self.provider_configs.location = location
            self.provider_configs.reload()
        if invalidate:
            for sync in syncs:
                sync.invalidate()

    def _check_unknown(self, node, sync):
        """Report allocations of consumers this agent does not know, when
        the root's generation moved (allocations change it); a consumer is
        reported once it is found twice in a row, so an allocation the
        scheduler makes just before its claim arrives is not reported."""
        root = sync.view.get(node)
        if self._client is None or root is None:
            return
        with self._mutex:
            report = self._reports.setdefault(node, allocations.ConsumerReport())
        previous = self._unknown_seen.get(node, {})
        # Candidates not yet confirmed are looked at again on the next tick,
        # even if nothing moved; otherwise only when the generation moves.
        pending = set(previous) - set(report.unknown)
        if self._unknown_gen.get(node) == root.generation and not pending:
            return
        found = self._unknown_found(node)
        self._unknown_seen[node] = found
        self._unknown_gen[node] = root.generation
        report.update({c: a for c, a in found.items() if c in previous})

    def _unknown_found(self, node_uuid):
        snap = self.nodes.get(node_uuid).snapshot()
        known = (
            {i.uuid for i in snap.instances}
            | {m.uuid for m in snap.migrations}
            | {m.instance_uuid for m in snap.migrations}
            | set(snap.released)
        )
        return allocations.unknown_consumers(
            self._client, self._sync_for(node_uuid).view.generations(), known
        )

    def claim_standalone(self, instance_uuid, flavor, *, project_id, user_id, node_uuid=None, **kw):
        """Claim locally and write the allocation to Placement ourselves
        (no Nova scheduler); a refusal by Placement rolls the claim back.

        See :func:`rtagent.placement.standalone.claim_standalone`.
        """
        tracker = self.nodes.get(node_uuid) if node_uuid else self.tracker
        return standalone.claim_standalone(
            tracker,
            self._client,
            instance_uuid,
            flavor,
            project_id=project_id,
            user_id=user_id,
            **kw,
        )

    def sync_status(self):
        """node UUID -> sync state (in sync, last success, last error...)."""
        with self._mutex:
            healths = list(self._health.items())
        unknown = self.unknown_consumers()
        return {
            node: dict(health.status().to_dict(), unknown_consumers=sorted(unknown.get(node, {})))
            for node, health in healths
        }

    def report_unknown_consumers(self, node_uuid=None):
        """Check now (one GET per provider) for allocations on our providers
        held by consumers this agent does not know; reported (log, status,
        metrics), never deleted. :returns: {consumer: allocations}."""
        node_uuid = node_uuid or self.nodes.primary_uuid
        with self._mutex:
            report = self._reports.setdefault(node_uuid, allocations.ConsumerReport())
        return report.update(self._unknown_found(node_uuid))

    def unknown_consumers(self):
        """node UUID -> {consumer: allocations} as last reported."""
        with self._mutex:
            reports = list(self._reports.items())
        return {node: report.unknown for node, report in reports}

    def close(self):
        """Close the hypervisor connection and the state store."""
        self.driver.close()
        if self._store is not None:
            self._store.close()
