"""The last synced view, kept across restarts (kubelet's checkpoint).

Without it every agent of a fleet restarted at once (an upgrade, a
control-plane restart) reads its whole tree from Placement in the same few
seconds: a listing, then the inventories and traits of every provider, then
every provider's allocations. With it a restarted agent whose desired tree
and consumers are those of its last sync trusts the view it last read, and
its first look at Placement comes at a random point of its refresh interval
(:meth:`rtagent.placement.sync.ProviderSync.restore`), as in steady state.

Trusting an old view is safe for the same reason the refresh interval is:
a generation that moved meanwhile makes the next write conflict, and a
conflict re-reads the provider; a foreign change is seen at the next due
read. The record holds no secret and nothing that accounting depends on.

Pure functions of the record plus :class:`MetaRecord`, the one place that
touches the durable key-value store (the tracker store's metadata).
"""

import dataclasses
import hashlib
import json
import logging

from rtagent.exception import RtagentError
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map

LOG = logging.getLogger(__name__)

# Bumped when the record's meaning changes: an older record is then ignored
# (the agent reads Placement at once, as without a record).
VERSION = 1


class MetaRecord:
    """One JSON value under one key of a durable key-value store.

    :param get: callable(key) -> str or None.
    :param put: callable(key, str) that is durable on return.
    """

    def __init__(self, get, put, key):
        self._get = get
        self._put = put
        self.key = key

    def load(self):
        """The stored value, or None when there is none or it is unreadable
        (logged: the caller then acts as on a first start)."""
        raw = self._get(self.key)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            LOG.warning("Ignoring the unreadable record %s: %s", self.key, exc)
            return None

    def save(self, value):
        """Store ``value``; a failed write is logged, never raised: the
        record only saves requests after a restart, Placement is right."""
        try:
            self._put(self.key, json.dumps(value, sort_keys=True))
        except RtagentError as exc:
            LOG.warning("Record %s not saved: %s", self.key, exc)


def digest(value):
    """A stable fingerprint of a desired tree or a set of consumers: equal
    values give equal digests in any process (sets are sorted, so string
    hash randomisation does not matter)."""
    text = json.dumps(_plain(value), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def encode(view, reported, local):
    """The record of a sync: Placement's ``view`` (a ProviderTree with
    generations), the desired tree it was asked for and the node's local
    marker (as digests)."""
    return {
        "version": VERSION,
        "reported": digest(reported),
        "local": digest(local),
        "view": [_provider(p) for p in view],
    }


def decode(record):
    """:returns: (view, reported digest, local digest), or None when the
    record is not one this version wrote (logged)."""
    try:
        if record.get("version") != VERSION:
            return None
        view = ProviderTree(
            Provider(
                uuid=p["uuid"],
                name=p["name"],
                parent_uuid=p["parent_uuid"],
                generation=int(p["generation"]),
                inventories=frozen_map(
                    {rc: Inventory(**inv) for rc, inv in p["inventories"].items()}
                ),
                traits=frozenset(p["traits"]),
            )
            for p in record["view"]
        )
        return view, str(record["reported"]), str(record["local"])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        LOG.warning("Ignoring the unreadable record of the last synced view: %s", exc)
        return None


def _provider(p):
    return {
        "uuid": p.uuid,
        "name": p.name,
        "parent_uuid": p.parent_uuid,
        "generation": p.generation,
        "inventories": {rc: inv.to_placement() for rc, inv in p.inventories.items()},
        "traits": sorted(p.traits),
    }


def _plain(value):
    """``value`` as JSON-able data with a canonical order."""
    if isinstance(value, ProviderTree):
        return [_plain(p) for p in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset)):
        return sorted((_plain(v) for v in value), key=repr)
    if hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
