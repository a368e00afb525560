"""The way back from a shared disk pool to nova's per-root layout
(``[libvirt] images_rbd_disk_on_each_root``, docs/rbd.md): the DISK_GB that
this node's guests hold on the pool's sharing provider moves to the root.

The pool's provider keeps its inventory (other hosts may still use it), so
nothing here is a change of inventory: the root got its DISK_GB from the
tree sync, and each guest's allocations are rewritten with the disk on the
root, one ``PUT /allocations/{consumer}`` with the consumer generation read
(a guest changed meanwhile is read again at the next run). Only consumers
this node knows are moved; other hosts' stay.

It looks once per start: a layout is chosen at start-up, and a steady node
must not read the pool's allocations at every audit. Until it has looked
without a failure it looks again at each sync.
"""

import logging

from rtagent.placement import errors, reshape
from rtagent.resources import DISK_GB

LOG = logging.getLogger(__name__)


class PoolReturnPass:
    def __init__(self, client):
        self._client = client
        self._done = False
        self._moved = 0

    def run(self, node):
        if self._done:
            return node
        snapshot = node.tracker.snapshot()
        pool = getattr(snapshot.host, "disk_pool", None) if snapshot.host is not None else None
        root = node.root
        if pool is None or pool.shared:
            self._done = snapshot.host is not None
            return node
        if root is None or DISK_GB not in root.inventories:
            return node  # the root's DISK_GB is not in Placement yet
        try:
            _, allocs = self._client.get_provider_allocations(pool.provider_uuid)
        except errors.PlacementRequestFailed as exc:
            if exc.status != 404:
                raise
            allocs = {}  # never shared: nothing to bring back
        ours = sorted(
            c for c, res in allocs.items() if res.get(DISK_GB) and c in snapshot.known_consumers
        )
        found = [reshape.Move(DISK_GB, pool.provider_uuid, node.node_uuid)]
        for consumer, body in reshape.moved_allocations(
            self._client, found, consumers=ours
        ).items():
            self._client.put_allocations(
                consumer,
                {rp: a["resources"] for rp, a in body["allocations"].items()},
                consumer_generation=body["consumer_generation"],
                project_id=body["project_id"],
                user_id=body["user_id"],
                consumer_type=body["consumer_type"],
            )
            self._moved += 1
            LOG.info(
                "Consumer %s: DISK_GB moved from the RBD pool's provider %s to the root %s "
                "(images_rbd_disk_on_each_root)",
                consumer,
                pool.provider_uuid,
                node.node_uuid,
            )
        self._done = True
        return node

    def status(self, known):
        return {"pool_disk_returned": self._moved}
