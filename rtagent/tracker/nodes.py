"""The nodes of one agent: a tracker per node, keyed by node UUID.

A libvirt host reports one node. It is the *primary* node, whose UUID is
the persistent ``compute_id``. A driver that reports several nodes names
them by ``hypervisor_hostname``; each name is given a UUID once and keeps it
(the mapping is in the state store). The rules, in order:

0. a view that carries its own ``node_uuid`` (a driver that owns node
   identity, as nova's virt drivers do) is that node, whatever its name;
1. a name seen before keeps its UUID;
2. a new name, when it is the only node reported, is the primary node
   renamed (a hostname change must not create a second provider);
3. a new name among several takes the primary UUID if no name holds it
   yet, else a fresh UUID.

A node the driver stops reporting leaves the view and is reported; its
claims stay in the store and come back with it.
"""

import logging
import threading
import uuid as uuidlib

from rtagent.tracker import errors

LOG = logging.getLogger(__name__)

_NAME_KEY = "node_uuid_for:"
_PRIMARY_NAME_KEY = "primary_node_name"


class NodeSet:
    """:param store: the shared :class:`~rtagent.tracker.store.Store`.
    :param primary_uuid: the compute_id node UUID.
    :param make_tracker: callable(node_uuid) -> Tracker.
    """

    def __init__(self, store, primary_uuid, make_tracker):
        self._store = store
        self._make_tracker = make_tracker
        self.primary_uuid = primary_uuid
        # Guards the mapping only; each tracker has its own lock.
        self._mutex = threading.Lock()
        self._trackers = {primary_uuid: make_tracker(primary_uuid)}
        self.removed = ()

    @property
    def primary(self):
        """The primary node's tracker (it exists even before any audit)."""
        with self._mutex:
            return self._trackers.get(self.primary_uuid) or self._make_primary()

    def _make_primary(self):
        tracker = self._make_tracker(self.primary_uuid)
        self._trackers[self.primary_uuid] = tracker
        return tracker

    def get(self, node_uuid):
        """The tracker of ``node_uuid``.

        :raises NodeNotFound: the agent does not report that node now.
        """
        with self._mutex:
            tracker = self._trackers.get(node_uuid)
        if tracker is None:
            raise errors.NodeNotFound(node=node_uuid)
        return tracker

    def trackers(self):
        with self._mutex:
            return list(self._trackers.values())

    def assign(self, views):
        """Pair each host view with its tracker; drop nodes not reported.

        :param views: HostView list from the driver's ``read_nodes()``.
        :returns: list of (tracker, view).
        """
        single = len(views) == 1
        pairs, seen = [], set()
        with self._mutex:
            for view in views:
                node_uuid = view.node_uuid or self._uuid_for(view.hypervisor_hostname, single)
                tracker = self._trackers.get(node_uuid)
                if tracker is None:
                    tracker = self._trackers[node_uuid] = self._make_tracker(node_uuid)
                    LOG.info("Node %s (%s) added", view.hypervisor_hostname, node_uuid)
                seen.add(node_uuid)
                pairs.append((tracker, view))
            gone = sorted(set(self._trackers) - seen)
            for node_uuid in gone:
                del self._trackers[node_uuid]
                LOG.warning(
                    "Node %s is no longer reported by the host driver: removed from the "
                    "view. Its claims stay in the state store and return with the node.",
                    node_uuid,
                )
            self.removed = tuple(gone)
        return pairs

    def _uuid_for(self, name, single):
        known = self._store.get_meta(_NAME_KEY + name)
        if known is not None:
            return known
        primary_name = self._store.get_meta(_PRIMARY_NAME_KEY)
        if single or primary_name is None:
            if primary_name is not None:
                # Renamed: the old name no longer stands for the primary node.
                self._store.delete_meta(_NAME_KEY + primary_name)
            self._store.set_meta(_PRIMARY_NAME_KEY, name)
            node_uuid = self.primary_uuid
        else:
            node_uuid = str(uuidlib.uuid4())
        self._store.set_meta(_NAME_KEY + name, node_uuid)
        return node_uuid
