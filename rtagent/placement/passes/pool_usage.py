"""What other hosts hold on a shared disk pool, for this node's claims.

Placement counts every allocation on the pool's sharing provider against
its DISK_GB; this node's tracker knows only its own claims. After each
sync this pass reads the pool provider's allocations (one GET, only when
its generation moved or the node's consumers changed) and hands the
tracker the part held by consumers the node does not know, with the ratio
Placement holds (:class:`~rtagent.tracker.pooldisk.PoolUsage`). Those
consumers are other hosts': they are never reported as unknown here
(:mod:`.unknown` leaves sharing providers out) and never healed.
"""

from rtagent.resources import DISK_GB
from rtagent.tracker import pooldisk
from rtagent.tracker.pooldisk import PoolUsage


class PoolUsagePass:
    def __init__(self, client):
        self._client = client
        # (pool provider, its generation, the node's known consumers) of
        # the last reading, and what it found.
        self._read = None
        self._usage = None

    def run(self, node):
        snapshot = node.tracker.snapshot()
        # The node's own disk pool only: a virt driver's other sharing
        # providers are not what its claims count DISK_GB against.
        pool = pooldisk.shared(snapshot.host)
        seen = node.view.get(pool.provider_uuid) if pool is not None else None
        if seen is None:
            return node
        known = snapshot.known_consumers
        key = (pool.provider_uuid, seen.generation, known)
        if key != self._read:
            _, allocs = self._client.get_provider_allocations(pool.provider_uuid)
            others = sum(res.get(DISK_GB, 0) for c, res in allocs.items() if c not in known)
            inv = seen.inventories.get(DISK_GB)
            self._usage = PoolUsage(
                others_gb=others, allocation_ratio=inv.allocation_ratio if inv else None
            )
            self._read = key
        node.tracker.set_pool_usage(self._usage)
        return node

    def status(self, known):
        usage = self._usage
        return {"pool_others_gb": usage.others_gb if usage is not None else None}
