"""DISK_GB of a storage pool that several hosts share, as claims count it.

Placement checks a claim's DISK_GB against the pool's sharing provider:
capacity = (total - reserved) x ratio, less every allocation on it, this
host's and the others'. A claim here is checked the same way: the pool's
inventory (from the last reading of the cluster), this node's own claims,
and what the other hosts' consumers hold on the pool as Placement last
said (:class:`PoolUsage`, set after each sync). Pure.
"""

import dataclasses

from rtagent.resources import DISK_GB, Inventory, frozen_map


@dataclasses.dataclass(frozen=True)
class PoolUsage:
    """What Placement holds on the pool's sharing provider, besides this
    node's own consumers.

    :param others_gb: DISK_GB allocated on the pool to consumers this node
        does not know (other hosts' guests, volumes of another service).
    :param allocation_ratio: the DISK_GB ratio on the pool's provider in
        Placement, or None before it was read.
    """

    others_gb: int = 0
    allocation_ratio: float | None = None


def shared(host):
    """The host's :class:`~rtagent.virt.host.DiskPool` when its DISK_GB is
    published on a sharing provider, else None."""
    pool = getattr(host, "disk_pool", None) if host is not None else None
    return pool if pool is not None and pool.shared else None


def pool_inventory(pool, policy, ratio=None, resolve_ratio=True):
    """The pool's DISK_GB :class:`Inventory` (None when it has no GiB).

    Nothing is reserved: ``reserved_host_disk_mb`` is a host's disk, and
    the pool's own usage by data Placement does not know (Glance images,
    volumes) is already out of ``total`` (what can still be written plus
    what is stored: see :attr:`rtagent.virt.rbd.figures.PoolFigures.capacity_gb`).

    :param ratio: the ratio on the pool's provider in Placement, or None.
    :param resolve_ratio: False for the desired Placement view: an
        unconfigured ratio is None there (Placement's value stands).
    """
    if pool.total_gb < 1:
        return None
    return Inventory(
        total=pool.total_gb,
        reserved=0,
        min_unit=1,
        max_unit=pool.total_gb,
        step_size=1,
        allocation_ratio=(
            policy.effective_ratio(DISK_GB, ratio)
            if resolve_ratio
            else policy.managed_ratio(DISK_GB)
        ),
    )


def with_pool(inventories, host, policy, usage):
    """``inventories`` (the root's, for claims) with the shared pool's
    DISK_GB in place of the root's, when ``host``'s disk is a shared pool."""
    pool = shared(host)
    if pool is None:
        return inventories
    invs = {rc: inv for rc, inv in inventories.items() if rc != DISK_GB}
    inv = pool_inventory(pool, policy, usage.allocation_ratio if usage else None)
    if inv is not None:
        invs[DISK_GB] = inv
    return frozen_map(invs)


def others(host, usage):
    """What other consumers hold on the pool, as extra usage mappings for
    :func:`rtagent.tracker.ledger.usage` (``()`` when none)."""
    if shared(host) is None or usage is None or not usage.others_gb:
        return ()
    return (frozen_map({DISK_GB: usage.others_gb}),)
