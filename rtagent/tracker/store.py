"""The durable local record of tracked instances (SQLite, WAL, fsync).

Only the tracker calls this, under its lock. Every write is one transaction
committed with ``synchronous=FULL``: in WAL mode that fsyncs the log at each
commit, so a claim acknowledged after ``put_instance`` returns survives
``kill -9`` and power loss. Files are created owner-only.
"""

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import threading

from rtagent.tracker import errors
from rtagent.tracker.model import Instance, Migration
from rtagent.tracker.state import Changes

LOG = logging.getLogger(__name__)

DB_NAME = "rtagent.sqlite"
LOCK_NAME = "rtagent.lock"
SCHEMA_VERSION = 3

# Version 2 added the migrations table, version 3 the released consumers;
# older stores open unchanged (the new tables start empty).
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS instances ("
    " uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS migrations ("
    " uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS released (uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL)",
)


def ensure_private_dir(path):
    """Create ``path`` 0700 if it is missing.

    An existing directory keeps its mode: it may be shared with other
    software that needs it (nova's state directory holds the instances that
    qemu must traverse). Only a world-writable one is refused.

    :raises StateError: it cannot be created, is not a directory, or is
        writable by anyone.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not os.path.isdir(path):
            raise NotADirectoryError(path)
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise errors.StateError(path=path, reason=exc.strerror or str(exc)) from exc
    if mode & 0o002:
        raise errors.StateError(path=path, reason="is world-writable; make it 0700")


def _lock_exclusively(state_path):
    """Hold an exclusive lock on ``state_path`` for this process's lifetime.

    Two agents over one state directory would each keep their own ledger
    and grant the same capacity twice.
    """
    path = os.path.join(state_path, LOCK_NAME)
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise errors.StateError(path=path, reason=exc.strerror or str(exc)) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise errors.StateError(
            path=state_path,
            reason=f"is in use by another rtagent process (pid {holder}); "
            "stop it first, or give this one its own state_path",
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
    return fd


class Store:
    """Instances and small metadata in ``state_path/rtagent.sqlite``."""

    def __init__(self, state_path):
        ensure_private_dir(state_path)
        self.path = os.path.join(state_path, DB_NAME)
        self._lock_fd = _lock_exclusively(state_path)
        # One connection shared by the trackers of all nodes, each under its
        # own lock: this mutex keeps their transactions from interleaving.
        self._mutex = threading.RLock()
        try:
            # Create the file ourselves so it is 0600 from its first byte;
            # SQLite gives the -wal and -shm files the same mode.
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
            os.chmod(self.path, 0o600)
            # Used only under the tracker lock, from whichever thread holds it.
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            with self._transaction():
                for statement in _SCHEMA:
                    self._db.execute(statement)
            self._check_schema()
        except sqlite3.Error as exc:
            self._release_lock()
            raise errors.StateError(path=self.path, reason=str(exc)) from exc
        except OSError as exc:
            self._release_lock()
            raise errors.StateError(path=self.path, reason=exc.strerror or str(exc)) from exc
        except errors.StateError:
            self._release_lock()
            raise

    def _release_lock(self):
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def _check_schema(self):
        found = self.get_meta("schema_version")
        if found is None or int(found) < SCHEMA_VERSION:
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        elif int(found) > SCHEMA_VERSION:
            raise errors.StateError(
                path=self.path,
                reason=f"schema version {found} is newer than this rtagent "
                f"understands ({SCHEMA_VERSION}); run the newer rtagent",
            )

    @contextlib.contextmanager
    def _transaction(self):
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                # Also after a failed COMMIT (disk full, I/O error): SQLite may
                # leave the transaction open, and every later BEGIN would fail.
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
                raise

    def _write(self, sql, params):
        try:
            with self._transaction():
                self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise errors.StateError(path=self.path, reason=str(exc)) from exc

    def get_meta(self, key):
        with self._mutex:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key, value):
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def delete_meta(self, key):
        self._write("DELETE FROM meta WHERE key = ?", (key,))

    def load_instances(self, node_uuid):
        """Every instance tracked on ``node_uuid``, sorted by UUID."""
        try:
            with self._mutex:
                rows = self._db.execute(
                    "SELECT body FROM instances WHERE node_uuid = ? ORDER BY uuid", (node_uuid,)
                ).fetchall()
            return [Instance.from_dict(json.loads(body)) for (body,) in rows]
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
            raise errors.StateError(path=self.path, reason=f"unreadable instance: {exc}") from exc

    def load_migrations(self, node_uuid):
        """Every move recorded on ``node_uuid``, sorted by UUID."""
        try:
            with self._mutex:
                rows = self._db.execute(
                    "SELECT body FROM migrations WHERE node_uuid = ? ORDER BY uuid", (node_uuid,)
                ).fetchall()
            return [Migration.from_dict(json.loads(body)) for (body,) in rows]
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
            raise errors.StateError(path=self.path, reason=f"unreadable migration: {exc}") from exc

    def load_released(self, node_uuid):
        """UUIDs of instances that left ``node_uuid`` and are not yet healed."""
        try:
            with self._mutex:
                rows = self._db.execute(
                    "SELECT uuid FROM released WHERE node_uuid = ?", (node_uuid,)
                ).fetchall()
        except sqlite3.Error as exc:
            raise errors.StateError(path=self.path, reason=str(exc)) from exc
        return frozenset(uuid for (uuid,) in rows)

    def apply(self, node_uuid, changes):
        """Write a :class:`rtagent.tracker.state.Changes` in ONE transaction.

        Durable when this returns; on error nothing of it was written.

        :raises StateError: the write failed.
        """
        try:
            with self._transaction():
                for instance in changes.put_instances:
                    self._db.execute(
                        "INSERT OR REPLACE INTO instances (uuid, node_uuid, body) VALUES (?, ?, ?)",
                        (instance.uuid, node_uuid, _dump(instance)),
                    )
                for uuid in changes.delete_instances:
                    self._db.execute("DELETE FROM instances WHERE uuid = ?", (uuid,))
                for migration in changes.put_migrations:
                    self._db.execute(
                        "INSERT OR REPLACE INTO migrations (uuid, node_uuid, body)"
                        " VALUES (?, ?, ?)",
                        (migration.uuid, node_uuid, _dump(migration)),
                    )
                for uuid in changes.delete_migrations:
                    self._db.execute("DELETE FROM migrations WHERE uuid = ?", (uuid,))
                for uuid in changes.put_released:
                    self._db.execute(
                        "INSERT OR REPLACE INTO released (uuid, node_uuid) VALUES (?, ?)",
                        (uuid, node_uuid),
                    )
                for uuid in changes.delete_released:
                    self._db.execute("DELETE FROM released WHERE uuid = ?", (uuid,))
        except sqlite3.Error as exc:
            raise errors.StateError(path=self.path, reason=str(exc)) from exc

    def put_instance(self, node_uuid, instance):
        """Insert or replace one instance; durable when this returns."""
        self.apply(node_uuid, Changes(put_instances=(instance,)))

    def delete_instance(self, instance_uuid):
        """Forget one instance; durable when this returns."""
        self.apply(None, Changes(delete_instances=(instance_uuid,)))

    def close(self):
        """Close the database and release the state directory. Idempotent."""
        self._db.close()
        self._release_lock()


def _dump(record):
    return json.dumps(record.to_dict(), sort_keys=True)
