"""The node's persistent identity: one UUID, created once, never replaced.

The UUID names the root resource provider in Placement. Losing it would make
the next start register a second provider for the same host (an operator
pain with nova-compute), so it lives in ``state_path/compute_id`` (the file
name nova-compute uses, so an rtagent pointed at nova's state directory
keeps nova's provider) and a copy lives in the store. A missing file is
restored from the store; a file that disagrees with the store, or that does
not hold a UUID, stops the agent with instructions instead of guessing.

The store has an identity too: a random id in its metadata, copied to
``state_path/rtagent.store_id`` once the store exists. Only rtagent writes
that file, so it tells a first start (perhaps beside nova's ``compute_id``)
from a start whose store was lost (see :class:`~rtagent.tracker.store.Store`).
"""

import contextlib
import os
import uuid as uuidlib

from rtagent.tracker import errors

FILE_NAME = "compute_id"
STORE_FILE_NAME = "rtagent.store_id"
_META_KEY = "node_uuid"


def load_or_create(state_path, store, new_uuid=None):
    """Return the node UUID, creating and persisting it on first start.

    :param new_uuid: the UUID to use if none exists yet (tests pin it).
    :raises NodeIdentityError: the file is unreadable, malformed, or
        disagrees with the store.
    """
    path = os.path.join(state_path, FILE_NAME)
    from_file = _read(path)
    from_store = store.get_meta(_META_KEY)
    if from_file and from_store and from_file != from_store:
        raise errors.NodeIdentityError(
            path=path,
            reason=f"holds {from_file} but the state store {store.path} records "
            f"{from_store}. Restore the file that belongs with this store (or "
            "move the store away if the file is right); rtagent will not pick one.",
        )
    node_uuid = from_file or from_store or str(new_uuid or uuidlib.uuid4())
    if not from_file:
        _write_atomically(path, node_uuid)
    if not from_store:
        store.set_meta(_META_KEY, node_uuid)
    return node_uuid


def _read(path):
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
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


def _write_atomically(path, node_uuid):
    try:
        write_file_atomically(path, node_uuid + "\n")
    except OSError as exc:
        raise errors.NodeIdentityError(path=path, reason=f"cannot be written: {exc}") from exc


def read_store_marker(state_path):
    """The store id recorded in ``state_path``: None if there is no marker
    (the text found otherwise, perhaps empty).

    :raises StateError: the marker exists but cannot be read.
    """
    path = os.path.join(state_path, STORE_FILE_NAME)
    if not os.path.lexists(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            data = os.read(fd, 256)
        finally:
            os.close(fd)
    except OSError as exc:
        raise errors.StateError(path=path, reason=f"cannot be read: {exc}") from exc
    return data.decode("ascii", "replace").strip()


def write_store_marker(state_path, store_id):
    """Record ``store_id`` in ``state_path`` (atomically, 0600).

    :raises StateError: it cannot be written.
    """
    path = os.path.join(state_path, STORE_FILE_NAME)
    try:
        write_file_atomically(path, store_id + "\n")
    except OSError as exc:
        raise errors.StateError(path=path, reason=f"cannot be written: {exc}") from exc


def write_file_atomically(path, text):
    """Replace ``path`` with ``text``, durably: a crash leaves the old file
    or the new one. The file is created 0600 and never written through a
    symlink (a leftover or planted ``.tmp`` is removed, not followed).

    :raises OSError: the write failed.
    """
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
