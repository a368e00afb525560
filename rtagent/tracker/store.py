"""The durable local record of tracked instances (SQLite, WAL, fsync).

Only the tracker calls this, under its lock. Every write is one transaction
committed with ``synchronous=FULL``: in WAL mode that fsyncs the log at each
commit, so a claim acknowledged after ``put_instance`` returns survives
``kill -9`` and power loss. Files are created owner-only.
"""

import contextlib
import json
import os
import sqlite3

from rtagent.tracker import errors
from rtagent.tracker.model import Instance

DB_NAME = "rtagent.sqlite"
SCHEMA_VERSION = 1

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS instances ("
    " uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL, body TEXT NOT NULL)",
)


def ensure_private_dir(path):
    """Create ``path`` 0700 if missing; tighten it to 0700 if it exists.

    :raises StateError: it cannot be created or is not a directory.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not os.path.isdir(path):
            raise NotADirectoryError(path)
        os.chmod(path, 0o700)
    except OSError as exc:
        raise errors.StateError(path=path, reason=exc.strerror or str(exc)) from exc


class Store:
    """Instances and small metadata in ``state_path/rtagent.sqlite``."""

    def __init__(self, state_path):
        ensure_private_dir(state_path)
        self.path = os.path.join(state_path, DB_NAME)
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
            raise errors.StateError(path=self.path, reason=str(exc)) from exc
        except OSError as exc:
            raise errors.StateError(path=self.path, reason=exc.strerror or str(exc)) from exc

    def _check_schema(self):
        found = self.get_meta("schema_version")
        if found is None:
            self.set_meta("schema_version", str(SCHEMA_VERSION))
        elif int(found) > SCHEMA_VERSION:
            raise errors.StateError(
                path=self.path,
                reason=f"schema version {found} is newer than this rtagent "
                f"understands ({SCHEMA_VERSION}); run the newer rtagent",
            )

    @contextlib.contextmanager
    def _transaction(self):
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _write(self, sql, params):
        try:
            with self._transaction():
                self._db.execute(sql, params)
        except sqlite3.Error as exc:
            raise errors.StateError(path=self.path, reason=str(exc)) from exc

    def get_meta(self, key):
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key, value):
        self._write("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def load_instances(self, node_uuid):
        """Every instance tracked on ``node_uuid``, sorted by UUID."""
        try:
            rows = self._db.execute(
                "SELECT body FROM instances WHERE node_uuid = ? ORDER BY uuid", (node_uuid,)
            ).fetchall()
            return [Instance.from_dict(json.loads(body)) for (body,) in rows]
        except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
            raise errors.StateError(path=self.path, reason=f"unreadable instance: {exc}") from exc

    def put_instance(self, node_uuid, instance):
        """Insert or replace ``instance``; durable when this returns."""
        body = json.dumps(instance.to_dict(), sort_keys=True)
        self._write(
            "INSERT OR REPLACE INTO instances (uuid, node_uuid, body) VALUES (?, ?, ?)",
            (instance.uuid, node_uuid, body),
        )

    def delete_instance(self, instance_uuid):
        """Forget ``instance_uuid``; durable when this returns."""
        self._write("DELETE FROM instances WHERE uuid = ?", (instance_uuid,))

    def close(self):
        self._db.close()
