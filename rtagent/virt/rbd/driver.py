"""A host driver whose guests' disks live in a Ceph pool: another driver's
reading (libvirt's) with DISK_GB taken from the pool instead of the
instances path's filesystem.

The pool is read at each audit, just before the hypervisor, outside any
tracker lock, in bounded time (:mod:`.watch`); claims never wait for it (a
node read alone at a claim takes the pool's last figures).
"""

import dataclasses

from rtagent.resources import DISK_GB
from rtagent.virt import driver, errors, host
from rtagent.virt.rbd import figures as figmod


class RbdPoolDriver(driver.HostDriver):
    """``inner``'s readings with the pool's DISK_GB.

    :param inner: the host driver that reads the hypervisor.
    :param watch: a :class:`~.watch.PoolWatch` of the pool.
    :param pool: the pool's name (for messages before a first reading).
    :param shared: publish the pool once, on a sharing provider (see
        :class:`rtagent.virt.host.DiskPool`); False: on each root as nova.
    """

    def __init__(self, inner, watch, pool, shared=True):
        self._inner = inner
        self._watch = watch
        self._pool = pool
        self._shared = shared

    def read_host(self):
        return self.read_nodes()[0]

    def read_nodes(self, **kwargs):
        """Every node of ``inner`` with the pool's figures, the pool read
        now (bounded); ``kwargs`` go to ``inner.read_nodes``.

        :raises HostReadError: the pool was never read since the start: the
            node's disk is unknown, so no claim is checked against a guess.
        """
        # The pool first: an inner driver handed the agent's figures while
        # it reads (nova's, :meth:`bind`) gets them from this reading.
        reading = self._watch.read()
        views = self._inner.read_nodes(**kwargs)
        return [with_pool(view, reading, self._pool, self._shared) for view in views]

    def read_node(self, nodename):
        """One node of an inner driver that reads a node alone (nova's,
        at each claim: :meth:`rtagent.nova.hostdriver.NovaHostDriver.read_node`),
        with the pool's last figures: a claim never waits for the cluster,
        which is read at the audit.

        :raises HostReadError: as :meth:`read_nodes`.
        """
        view = self._inner.read_node(nodename)
        if view is None:
            return None
        return with_pool(view, self._watch.reading, self._pool, self._shared)

    def bind(self, seed, allocations):
        """An inner driver that is handed the agent's figures of the root
        (nova's, :meth:`rtagent.nova.hostdriver.NovaHostDriver.bind`) gets
        them computed with the pool's last figures: without, they would
        carry the inner reading's DISK_GB, which the agent does not
        publish, and nova's driver would be handed a root that is not the
        one in Placement."""

        def pooled(view):
            return seed(with_pool(view, self._watch.reading, self._pool, self._shared))

        self._inner.bind(seed=pooled, allocations=allocations)

    @property
    def managed_traits(self):
        return self._inner.managed_traits

    def published(self, node_uuid, tree):
        self._inner.published(node_uuid, tree)

    def close(self):
        self._inner.close()

    def __getattr__(self, name):
        # The rest of the inner driver's surface (call counts, availability)
        # is the hypervisor's, unchanged.
        return getattr(self._inner, name)


def with_pool(view, reading, pool, shared):
    """``view`` with the pool's disk figures from ``reading`` (pure).

    :raises HostReadError: ``reading`` has no figures yet.
    """
    found = reading.figures
    if found is None:
        raise errors.HostReadError(
            what=f"the RBD pool {pool!r}", reason=reading.error or "not read yet"
        )
    free_gb = found.max_avail // figmod.GIB
    state = host.DiskPool(
        pool=found.pool,
        shared=shared,
        provider_uuid=figmod.provider_uuid(found.fsid, found.pool),
        provider_name=figmod.provider_name(found.fsid, found.pool),
        aggregate_uuid=figmod.aggregate_uuid(found.fsid, found.pool),
        total_gb=found.capacity_gb,
        used_gb=found.used_gb,
        instance_disks=frozenset(found.instance_disks()),
        other_images=len(found.other_images()),
        stale_since=reading.stale_since,
        error=reading.error,
        read_at=reading.read_at,
    )
    if shared:
        local_gb, used_gb = found.capacity_gb, found.used_gb
    else:
        # Stock nova's libvirt driver on RBD: the cluster's raw size and the
        # pool's raw usage, on every host.
        local_gb, used_gb = found.nova_total_gb, found.nova_used_gb
    return dataclasses.replace(
        view,
        providers=_root_without_disk(view.providers, view.node_uuid),
        local_gb=local_gb,
        local_gb_used=used_gb,
        # nova's figure on RBD: the pool's free space (no local disk grows).
        disk_available_least=free_gb,
        disk_pool=state,
    )


def _root_without_disk(providers, root_uuid):
    """The inner driver's report of its providers (``HostView.providers``)
    with DISK_GB left out of the node's root, both what it reports and what
    it was handed (``ProviderFacts.seeded``): with the pool, DISK_GB on the
    root is the agent's to decide from the pool's figures (none with the
    sharing provider, the cluster's raw size in nova's layout). nova's
    libvirt driver on RBD puts the cluster's raw size on the root in its
    ``update_provider_tree`` whatever shares the pool (nova bug 1784020),
    and a figure the driver reports on the root is otherwise published as
    its decision (:func:`rtagent.placement.desired.driver_providers`)."""
    return tuple(
        dataclasses.replace(
            facts,
            inventories=_without_disk(facts.inventories),
            seeded=_without_disk(facts.seeded) if facts.seeded is not None else None,
        )
        if facts.uuid == root_uuid
        else facts
        for facts in providers
    )


def _without_disk(records):
    return tuple((rc, rec) for rc, rec in records if rc != DISK_GB)
