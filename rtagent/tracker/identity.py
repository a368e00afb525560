"""The node's persistent identity, and the store's.

The node UUID names the root resource provider in Placement. Losing it would
make the next start register a second provider for the same host (an
operator pain with nova-compute), so it lives in ``state_path/compute_id``
(the file name nova-compute uses, so nova's file copied here keeps nova's
provider) and a copy lives in the store. A missing
file is restored from the store; a file that disagrees with the store, or
that does not hold a UUID, stops the agent with instructions instead of
guessing.

The store has an identity too: a random id in its metadata, copied to
``state_path/rtagent.store_id`` once the store exists. Only rtagent writes
that file, so it tells a first start (perhaps beside nova's ``compute_id``)
from a start whose store was lost (see :class:`~rtagent.tracker.store.Store`).

Both files are read and written through the state directory
(:class:`~rtagent.tracker.statedir.StateDir`): never through a symlink.
"""

import os
import uuid as uuidlib

from rtagent.tracker import errors

FILE_NAME = "compute_id"
STORE_FILE_NAME = "rtagent.store_id"
# Every name this module writes (write_atomically adds ".tmp").
NAMES = (FILE_NAME, FILE_NAME + ".tmp", STORE_FILE_NAME, STORE_FILE_NAME + ".tmp")
_META_KEY = "node_uuid"


def load_or_create(state_path, store, new_uuid=None):
    """Return the node UUID, creating and persisting it on first start.

    :param state_path: the directory ``store`` was opened on; its files are
        read and written through ``store.state_dir``.
    :param new_uuid: the UUID to use if none exists yet (tests pin it).
    :raises NodeIdentityError: the file is unreadable, malformed, or
        disagrees with the store.
    :raises StateError: the file is a symlink or not a regular file.
    """
    state_dir = store.state_dir
    if os.path.normpath(state_path) != os.path.normpath(state_dir.path):
        raise ValueError(f"store of {state_dir.path} given for {state_path}")
    path = state_dir.join(FILE_NAME)
    from_file, from_store = _recorded(state_dir, store)
    node_uuid = from_file or from_store or str(new_uuid or uuidlib.uuid4())
    if not from_file:
        try:
            state_dir.write_atomically(FILE_NAME, node_uuid + "\n")
        except OSError as exc:
            raise errors.NodeIdentityError(path=path, reason=f"cannot be written: {exc}") from exc
    if not from_store:
        store.set_meta(_META_KEY, node_uuid)
    return node_uuid


def current(store):
    """The node UUID recorded in the state directory or ``store``, or None
    on a first start; reads only (``rtagent audit --dry-run``).

    :raises NodeIdentityError: as :func:`load_or_create`.
    """
    if store.state_dir is None:  # a copy of a directory that does not exist
        return store.get_meta(_META_KEY)
    from_file, from_store = _recorded(store.state_dir, store)
    return from_file or from_store


def _recorded(state_dir, store):
    """(the file's UUID, the store's), either None; refused if they differ."""
    from_file = _read(state_dir)
    from_store = store.get_meta(_META_KEY)
    if from_file and from_store and from_file != from_store:
        raise errors.NodeIdentityError(
            path=state_dir.join(FILE_NAME),
            reason=f"holds {from_file} but the state store {store.path} records "
            f"{from_store}. Restore the file that belongs with this store (or "
            "move the store away if the file is right); rtagent will not pick one.",
        )
    return from_file, from_store


def _read(state_dir):
    path = state_dir.join(FILE_NAME)
    try:
        data = state_dir.read(FILE_NAME)
        if data is None:
            return None
        text = data.decode("ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.NodeIdentityError(path=path, reason=f"cannot be read: {exc}") from exc
    try:
        return str(uuidlib.UUID(text))
    except ValueError:
        raise errors.NodeIdentityError(
            path=path,
            reason=f"does not hold a UUID ({text[:40]!r}). Restore it from a backup "
            "or from the root provider's UUID in Placement.",
        ) from None


def read_store_marker(state_dir):
    """The store id recorded in ``state_dir`` (a :class:`StateDir`): None if
    there is no marker (the text found otherwise, perhaps empty).

    :raises StateError: the marker exists but cannot be read, is a symlink
        or is not a regular file.
    """
    try:
        data = state_dir.read(STORE_FILE_NAME, limit=256)
    except OSError as exc:
        raise errors.StateError(
            path=state_dir.join(STORE_FILE_NAME), reason=f"cannot be read: {exc}"
        ) from exc
    return None if data is None else data.decode("ascii", "replace").strip()


def write_store_marker(state_dir, store_id):
    """Record ``store_id`` in ``state_dir`` (atomically, 0600).

    :raises StateError: it cannot be written.
    """
    try:
        state_dir.write_atomically(STORE_FILE_NAME, store_id + "\n")
    except OSError as exc:
        raise errors.StateError(
            path=state_dir.join(STORE_FILE_NAME), reason=f"cannot be written: {exc}"
        ) from exc
