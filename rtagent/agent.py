"""One audit: read the host, account under the lock, publish outside it.

This is the whole data path of a tick, in the order that keeps every
tracker lock free of I/O:

1. ``driver.read_nodes()``         hypervisor calls, no lock held;
2. ``tracker.update_host(view)``    per node, lock held: memory only;
3. ``desired_tree(snapshot)``       pure;
4. ``sync.sync(desired)``           per node, Placement calls, no lock held;
5. ``tracker.set_placement_ratios`` lock held: memory and one local write.
"""

import dataclasses
import logging
import time

from rtagent import exception
from rtagent.placement.desired import desired_tree
from rtagent.virt.errors import HypervisorUnavailable

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """:param snapshot, sync: the primary node's snapshot and sync result.
    :param nodes: node UUID -> (snapshot, sync result or the error raised).
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
    """

    def __init__(self, driver, nodes, make_sync, store=None, clock=time.monotonic):
        self.driver = driver
        self.nodes = nodes
        self._make_sync = make_sync
        self._syncs = {}
        self._store = store
        self._clock = clock

    @property
    def tracker(self):
        """The primary node's tracker."""
        return self.nodes.primary

    @property
    def sync(self):
        """The primary node's Placement sync."""
        return self._sync_for(self.nodes.primary_uuid)

    def _sync_for(self, node_uuid):
        sync = self._syncs.get(node_uuid)
        if sync is None:
            sync = self._syncs[node_uuid] = self._make_sync()
        return sync

    def audit(self):
        """Run one audit tick over every node.

        A failing node does not stop the others; the first error is raised
        after all nodes were tried.

        :raises rtagent.virt.errors.VirtError: the host could not be read;
            claims are refused until it can.
        :raises rtagent.placement.errors.PlacementError: a sync failed;
            local accounting is up to date and the next tick retries.
        """
        started = self._clock()
        try:
            views = self.driver.read_nodes()
        except HypervisorUnavailable as exc:
            # Claims checked against a host we cannot see could oversubscribe
            # it; refuse them until the next successful read.
            for tracker in self.nodes.trackers():
                tracker.mark_host_unavailable(exc)
            raise
        results, first_error = {}, None
        managed = self.driver.managed_traits
        for tracker, view in self.nodes.assign(views):
            snapshot = tracker.update_host(view)
            sync = self._sync_for(snapshot.node_uuid)
            desired = desired_tree(
                snapshot,
                driver_traits=getattr(view, "traits", frozenset()),
                managed_traits=managed,
            )
            try:
                outcome = sync.sync(desired)
                tracker.set_placement_ratios(sync.placement_ratios(snapshot.node_uuid))
            except exception.RtagentError as exc:
                if first_error is not None:
                    LOG.warning("Sync of node %s failed too: %s", snapshot.node_uuid, exc)
                first_error = first_error or exc
                outcome = exc
            results[snapshot.node_uuid] = (snapshot, outcome)
        for gone in self.nodes.removed:
            self._syncs.pop(gone, None)
        if first_error is not None:
            raise first_error
        seconds = self._clock() - started
        primary = results.get(self.nodes.primary_uuid) or next(iter(results.values()))
        LOG.debug("Audit of %d node(s) took %.3f s", len(results), seconds)
        return AuditResult(snapshot=primary[0], sync=primary[1], seconds=seconds, nodes=results)

    def close(self):
        """Close the hypervisor connection and the state store."""
        self.driver.close()
        if self._store is not None:
            self._store.close()
