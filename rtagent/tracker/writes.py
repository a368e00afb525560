"""What a change of a node's state must write to the store.

The tracker computes the next :class:`~rtagent.tracker.state.NodeState`
purely, writes :func:`changes` between the adopted state and it in one
transaction, and only then adopts it.
"""

import dataclasses
import json

# Per-node metadata keys in the store (names kept from schema version 1).
RATIOS_KEY = "placement_ratios:{node}"
DISABLED_KEY = "disabled:{node}"
FAILED_BUILDS_KEY = "failed_builds:{node}"


@dataclasses.dataclass(frozen=True)
class Changes:
    """Rows to write so that the store holds the new state."""

    put_instances: tuple = ()
    delete_instances: tuple = ()
    put_migrations: tuple = ()
    delete_migrations: tuple = ()
    put_released: tuple = ()
    delete_released: tuple = ()
    # (key, value) pairs of per-node metadata; a value of None deletes the key.
    meta: tuple = ()

    def __bool__(self):
        return bool(
            self.put_instances
            or self.delete_instances
            or self.put_migrations
            or self.delete_migrations
            or self.put_released
            or self.delete_released
            or self.meta
        )


def changes(old, new):
    """The store writes that turn ``old`` into ``new`` (durable fields only).

    Looks only at the entries an operation touched when ``new`` was made
    from ``old`` (see :class:`~rtagent.tracker.table.Table`), at every
    entry otherwise.
    """
    same_released = old.released is new.released
    return Changes(
        put_instances=_put(old.instances, new.instances),
        delete_instances=_deleted(old.instances, new.instances),
        put_migrations=_put(old.migrations, new.migrations),
        delete_migrations=_deleted(old.migrations, new.migrations),
        put_released=() if same_released else tuple(sorted(new.released - old.released)),
        delete_released=() if same_released else tuple(sorted(old.released - new.released)),
        meta=_meta_changes(old, new),
    )


def _put(old, new):
    if old is new:
        return ()
    keys = new.touched_since(old)
    if keys is None:
        return tuple(v for k, v in sorted(new.items()) if old.get(k) != v)
    return tuple(new[k] for k in sorted(keys) if k in new and old.get(k) != new[k])


def _deleted(old, new):
    if old is new:
        return ()
    keys = new.touched_since(old)
    if keys is None:
        keys = old.keys()
    return tuple(sorted(k for k in keys if k in old and k not in new))


def _meta_changes(old, new):
    node = new.node_uuid
    meta = []
    if old.disabled != new.disabled:
        meta.append((DISABLED_KEY.format(node=node), new.disabled))
    ratios = new.placement_ratios
    # The same mapping (a claim) is never compared entry by entry.
    if ratios is not old.placement_ratios and dict(ratios) != dict(old.placement_ratios):
        meta.append((RATIOS_KEY.format(node=node), json.dumps(dict(ratios), sort_keys=True)))
    if old.failed_builds != new.failed_builds:
        meta.append((FAILED_BUILDS_KEY.format(node=node), str(new.failed_builds)))
    return tuple(meta)
