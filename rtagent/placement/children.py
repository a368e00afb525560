"""The child providers this agent published, and their retirement.

They are the only providers the agent ever deletes: once a desired tree no
longer has one (a driver stopped reporting it, PCI reporting was turned
off), it is deleted, children before parents; also when that happened while
the agent was down, as the set is kept in a durable store
(:class:`RememberedChildren`). Someone else's provider is never among them.
A provider Placement refuses to delete (allocations still on it) is kept
and tried again at the next sync, unless the sync was told it may empty it.
"""

import json
import logging

from rtagent.exception import RtagentError
from rtagent.placement import errors, reshape

# The sync's logger: these lines are part of what an operator reads as the
# sync (docs/operations.md), whichever module now writes them.
LOG = logging.getLogger("rtagent.placement.sync")


class RememberedChildren:
    """Where a sync keeps the child providers it published, across restarts:
    one key of a durable key-value store (the tracker store's metadata).

    :param get: callable(key) -> str or None.
    :param put: callable(key, str) that is durable on return.
    """

    def __init__(self, get, put, key):
        self._get = get
        self._put = put
        self._key = key

    def load(self):
        """The remembered UUIDs; none (logged) if the record is unreadable:
        then a child dropped while the agent was down stays in Placement,
        as it would with no memory at all."""
        raw = self._get(self._key)
        if not raw:
            return frozenset()
        try:
            found = json.loads(raw)
            if not isinstance(found, list) or not all(isinstance(u, str) for u in found):
                raise ValueError("not a list of UUIDs")
        except ValueError as exc:
            LOG.warning(
                "Ignoring the unreadable record %s of published child providers: %s", self._key, exc
            )
            return frozenset()
        return frozenset(found)

    def save(self, uuids):
        self._put(self._key, json.dumps(sorted(uuids)))


class _Forgotten:
    """Children remembered by the process alone (tests, tools)."""

    def load(self):
        return frozenset()

    def save(self, uuids):
        pass


class PublishedChildren:
    """The child providers this agent published (``uuids``, a frozenset).

    :param remembered: a :class:`RememberedChildren` (or None: in memory
        only, so a child dropped while the process was down stays).
    """

    def __init__(self, client, remembered=None):
        self._client = client
        self._remembered = remembered or _Forgotten()
        self.uuids = self._remembered.load()

    def published(self, uuid):
        """Remember ``uuid``, a child provider just created, at once."""
        self._remember(self.uuids | {uuid})

    def retire(self, view, desired, drop, send):
        """Delete the child providers an earlier desired tree had and
        ``desired`` has not, children before parents; those in ``drop`` are
        emptied of allocations first. A provider Placement refuses to
        delete (allocations still on it) is tried again next sync.

        :param view: the :class:`~rtagent.placement.seen.PlacementView` of
            the sync (its listing says which are still there).
        :param drop: UUIDs whose allocations may be removed (PCI reporting
            turned off): emptied by a reshape, then deleted. Any other
            retired provider with allocations on it is kept.
        :param send: callable(call, *args) making one write
            (:meth:`~rtagent.placement.flusher.Flusher.send`).
        :returns: the UUIDs of those kept that way.
        """
        listed = view.listed
        wanted = {p.uuid for p in desired}
        retired = [u for u in self.uuids if u not in wanted and u in listed]
        self._empty([u for u in retired if u in drop], listed, send)

        def depth(uuid):
            hops, parent = 0, listed[uuid].parent_uuid
            while parent in listed and hops < len(listed):
                hops, parent = hops + 1, listed[parent].parent_uuid
            return hops

        kept = set()
        for uuid in sorted(retired, key=depth, reverse=True):
            try:
                self._client.delete_provider(uuid)
            except errors.PlacementRequestFailed as exc:
                LOG.warning("Provider %s, no longer desired, not deleted: %s", uuid, exc)
                kept.add(uuid)
                continue
            LOG.info("Placement updated: deleted provider %s (no longer reported)", uuid)
        children = frozenset(p.uuid for p in desired if p.parent_uuid is not None) | kept
        if children != self.uuids:  # a steady sync writes nothing
            self._remember(children)
        return kept

    def _empty(self, uuids, listed, send):
        """Remove every allocation on ``uuids`` and their inventories, in
        one ``POST /reshaper``. A conflict or refusal is logged: the
        provider is then kept by the delete and tried again next sync."""
        bodies = reshape.emptied(self._client, uuids) if uuids else {}
        if not bodies:
            return
        payload = {
            uuid: {"resource_provider_generation": listed[uuid].generation, "inventories": {}}
            for uuid in uuids
        }
        try:
            send(self._client.reshape, payload, bodies)
        except (errors.GenerationConflict, errors.PlacementRequestFailed) as exc:
            LOG.warning("Allocations on providers %s not removed: %s", sorted(uuids), exc)
            return
        LOG.info(
            "Reshaped provider tree: removed the allocations of %d consumer(s) from "
            "provider(s) %s, no longer reported",
            len(bodies),
            ", ".join(sorted(uuids)),
        )

    def _remember(self, uuids):
        # A failed write loses only the memory of a child published since;
        # Placement is already right.
        try:
            self._remembered.save(uuids)
        except RtagentError as exc:
            LOG.warning("Child providers %s not remembered across a restart: %s", uuids, exc)
        self.uuids = uuids
