"""A storage pool several hosts share, as Placement should hold it: pure.

nova's documented layout for shared storage: one provider for the pool,
with the DISK_GB inventory and the ``MISC_SHARES_VIA_AGGREGATE`` trait, in
an aggregate with every compute root that uses the pool; the roots carry no
DISK_GB of their own. The scheduler then takes a guest's disk from the
pool's provider, once for the whole cloud. Every host derives the same
provider and aggregate UUIDs from the cluster's fsid and the pool's name
(:mod:`rtagent.virt.rbd.figures`), so the first agent to sync creates the
provider and the others find it; no agent ever deletes it (it is a
``sharing`` provider, :class:`~rtagent.placement.tree.Provider`).

With the pool on each root instead (nova's own behaviour), the root leaves
the pool's aggregate: a root in it would offer the scheduler the pool's
DISK_GB beside its own.
"""

import os_traits

from rtagent.placement.tree import Provider
from rtagent.resources import DISK_GB, frozen_map
from rtagent.tracker import pooldisk

SHARING_TRAIT = os_traits.MISC_SHARES_VIA_AGGREGATE


def pool_provider(snapshot):
    """The pool's sharing provider for ``snapshot``, or None when its DISK_GB
    is not shared (no pool, or nova's per-root layout)."""
    pool = pooldisk.shared(snapshot.host)
    if pool is None:
        return None
    policy = snapshot.policy
    inv = pooldisk.pool_inventory(pool, policy, resolve_ratio=False)
    return Provider(
        uuid=pool.provider_uuid,
        name=pool.provider_name,
        inventories=frozen_map({DISK_GB: inv} if inv is not None else {}),
        traits=frozenset({SHARING_TRAIT}),
        managed_traits=frozenset({SHARING_TRAIT}),
        managed_classes=frozenset({DISK_GB}),
        # An unconfigured disk_allocation_ratio keeps Placement's; the
        # first agent creates the inventory with the initial one.
        ratio_defaults=frozen_map({DISK_GB: policy.initial_ratios.get(DISK_GB, 1.0)}),
        aggregates=frozenset({pool.aggregate_uuid}),
        managed_aggregates=frozenset({pool.aggregate_uuid}),
        sharing=True,
    )


def joined(root, snapshot):
    """``root`` in the pool's aggregate when the pool is shared, out of it
    when the pool is on each root; other aggregates (nova-api's host
    aggregates) are left alone."""
    pool = getattr(snapshot.host, "disk_pool", None) if snapshot.host is not None else None
    if pool is None:
        return root
    aggregate = frozenset({pool.aggregate_uuid})
    current = root.aggregates or frozenset()
    return root.replace(
        aggregates=(current | aggregate) if pool.shared else (current - aggregate),
        managed_aggregates=root.managed_aggregates | aggregate,
    )
