"""One audit: read the host, account under the lock, publish outside it.

This is the whole data path of a tick, in the order that keeps the tracker
lock free of I/O:

1. ``driver.read_host()``        hypervisor calls, no lock held;
2. ``tracker.update_host(host)``  lock held: memory only, returns a snapshot;
3. ``desired_tree(snapshot)``     pure;
4. ``sync.sync(desired)``         Placement calls, no lock held;
5. ``tracker.set_placement_ratios`` lock held: memory only.
"""

import dataclasses
import logging
import time

from rtagent.placement.desired import desired_tree
from rtagent.virt.errors import HypervisorUnavailable

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AuditResult:
    snapshot: object
    sync: object
    seconds: float


class Agent:
    """Ties a host driver, a tracker and a Placement sync together.

    Claims go straight to ``agent.tracker`` (in-process API); they never
    wait for an audit's I/O.
    """

    def __init__(self, driver, tracker, sync, store=None, clock=time.monotonic):
        self.driver = driver
        self.tracker = tracker
        self.sync = sync
        self._store = store
        self._clock = clock

    def audit(self):
        """Run one audit tick. Errors propagate to the caller (the loop).

        :raises rtagent.virt.errors.VirtError: the host could not be read;
            the tracker keeps its previous host view.
        :raises rtagent.placement.errors.PlacementError: the sync failed;
            local accounting is up to date and the next tick retries.
        """
        started = self._clock()
        try:
            host = self.driver.read_host()
        except HypervisorUnavailable as exc:
            # Claims checked against a host we cannot see could oversubscribe
            # it; refuse them until the next successful read.
            self.tracker.mark_host_unavailable(exc)
            raise
        snapshot = self.tracker.update_host(host)
        result = self.sync.sync(desired_tree(snapshot))
        self.tracker.set_placement_ratios(self.sync.placement_ratios(snapshot.node_uuid))
        seconds = self._clock() - started
        LOG.debug("Audit of node %s took %.3f s", snapshot.node_uuid, seconds)
        return AuditResult(snapshot=snapshot, sync=result, seconds=seconds)

    def close(self):
        """Close the hypervisor connection and the state store."""
        self.driver.close()
        if self._store is not None:
            self._store.close()
