"""The durable local record of tracked instances (SQLite, WAL, fsync).

Only the tracker calls this, under its lock. Every write is one transaction
committed with ``synchronous=FULL``: in WAL mode that fsyncs the log at each
commit, so a claim acknowledged after ``put_instance`` returns survives
``kill -9`` and power loss. Files are created owner-only.

Rows are keyed by ``(node_uuid, uuid)``: a move between two nodes of one
agent holds the instance and the migration on both nodes at once. A store
of an older schema is migrated on open, in one transaction.

A store that is missing or empty where this agent had one (its marker file
:data:`rtagent.tracker.identity.STORE_FILE_NAME` is there) is refused
unless the operator accepts starting empty: the claims it held would
otherwise vanish without a word.
"""

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import threading
import urllib.parse
import uuid as uuidlib

from rtagent import excerpt
from rtagent.tracker import errors, identity, statedir
from rtagent.tracker import rows as rows_check
from rtagent.tracker.model import Instance, Migration
from rtagent.tracker.writes import Changes

LOG = logging.getLogger(__name__)

DB_NAME = "rtagent.sqlite"
LOCK_NAME = "rtagent.lock"
# 5: rows may hold NUMA claims (an instance's "numa", a move's "old_numa"
# and "new_numa"); the tables are those of 4. An rtagent that understands
# only 4 would drop them when it rewrites a row, and two guests could then
# be pinned to one CPU: the version makes it refuse the store instead.
# 6: rows may hold PCI devices (an instance's "pci_devices", a move's
# "old_pci" and "new_pci"), for the same reason: an rtagent that knows only
# 5 would drop them and give one device to two guests.
SCHEMA_VERSION = 6
_STORE_ID_KEY = "store_id"

# A row is a few KiB even with NUMA cells and PCI devices; one far longer
# was not written by rtagent, and is refused before it is decoded.
MAX_ROW_CHARS = 1024 * 1024

# A node's rows, each with whether it is too long to decode (then not read).
_SELECT = "SELECT uuid, length(body) > ?, CASE WHEN length(body) > ? THEN '' ELSE body END"
_SELECT_ROWS = {
    "instances": _SELECT + " FROM instances WHERE node_uuid = ? ORDER BY uuid",
    "migrations": _SELECT + " FROM migrations WHERE node_uuid = ? ORDER BY uuid",
}


# Version 4: rows keyed by (node_uuid, uuid).
_CREATE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE instances (node_uuid TEXT NOT NULL, uuid TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (node_uuid, uuid))",
    "CREATE TABLE migrations (node_uuid TEXT NOT NULL, uuid TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (node_uuid, uuid))",
    "CREATE TABLE released (node_uuid TEXT NOT NULL, uuid TEXT NOT NULL,"
    " PRIMARY KEY (node_uuid, uuid))",
)
# Versions 1-3 keyed rows by UUID alone, so a second node's row replaced the
# first's. Version 2 added the migrations table, version 3 the released
# consumers: an older store gets the tables it lacks, empty, first.
_COMPLETE_OLD = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS instances ("
    " uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS migrations ("
    " uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS released (uuid TEXT PRIMARY KEY, node_uuid TEXT NOT NULL)",
)
_MIGRATE = (
    "ALTER TABLE instances RENAME TO old_instances",
    "ALTER TABLE migrations RENAME TO old_migrations",
    "ALTER TABLE released RENAME TO old_released",
    *_CREATE[1:],
    "INSERT INTO instances (node_uuid, uuid, body) SELECT node_uuid, uuid, body FROM old_instances",
    "INSERT INTO migrations (node_uuid, uuid, body)"
    " SELECT node_uuid, uuid, body FROM old_migrations",
    "INSERT INTO released (node_uuid, uuid) SELECT node_uuid, uuid FROM old_released",
    "DROP TABLE old_instances",
    "DROP TABLE old_migrations",
    "DROP TABLE old_released",
)


# Every name the agent keeps in its state directory, SQLite's own included.
_NAMES = (
    DB_NAME,
    DB_NAME + "-wal",
    DB_NAME + "-shm",
    DB_NAME + "-journal",
    LOCK_NAME,
    *identity.NAMES,
)


def _lock_exclusively(state_dir):
    """Hold an exclusive lock on ``state_dir`` for this process's lifetime.

    Two agents over one state directory would each keep their own ledger
    and grant the same capacity twice.
    """
    try:
        fd = state_dir.open(LOCK_NAME, os.O_CREAT | os.O_RDWR)
    except OSError as exc:
        raise errors.StateError(
            path=state_dir.join(LOCK_NAME), reason=exc.strerror or str(exc)
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise errors.StateError(
            path=state_dir.path,
            reason=f"is in use by another rtagent process (pid {holder}); "
            "stop it first, or give this one its own state_path",
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
    return fd


class Store:
    """Instances, moves, released consumers and small metadata in
    ``state_path/rtagent.sqlite``.

    :param accept_empty: start with a new, empty store even where this
        agent had one before (the operator's explicit choice, e.g.
        ``rtagent run --accept-empty-state``).
    :raises StateError: the directory or the database is unusable, its
        schema is newer than this code's, or the store is missing or empty
        where one existed (and ``accept_empty`` is false).
    """

    def __init__(self, state_path, *, accept_empty=False):
        #: The state directory (statedir.StateDir), open while the store is.
        self.state_dir = statedir.StateDir(state_path)
        self.path = self.state_dir.join(DB_NAME)
        self._lock_fd = None
        # One connection shared by the trackers of all nodes, each under its
        # own lock: this mutex keeps their transactions from interleaving.
        self._mutex = threading.RLock()
        self._db = None
        try:
            # Before anything is opened: SQLite opens its files by path.
            self.state_dir.check_names(_NAMES)
            # Before we create the lock file: an rtagent older than the store
            # marker left only these to say that it ran here with a store. Both
            # old and new code write compute_id only once their store exists, so
            # a first start that failed before that (lock file only), and
            # nova's compute_id copied into a fresh directory (no lock file),
            # are first starts, not lost stores.
            ran_here = self.state_dir.exists(LOCK_NAME) and self.state_dir.exists(
                identity.FILE_NAME
            )
            self._lock_fd = _lock_exclusively(self.state_dir)
            self._db = self._connect()
            self._open(ran_here, accept_empty)
        except sqlite3.Error as exc:
            self.close()
            raise errors.StateError(path=self.path, reason=str(exc)) from exc
        except OSError as exc:
            self.close()
            raise errors.StateError(path=self.path, reason=exc.strerror or str(exc)) from exc
        except BaseException:
            self.close()
            raise

    @classmethod
    def copy_of(cls, state_path, *, accept_empty=False):
        """A private in-memory copy of the store at ``state_path`` (for
        ``rtagent audit --dry-run``): nothing there is created or changed
        and no lock is taken, so it works beside a running agent; writes go
        to the copy only. A missing directory or database gives an empty
        store. The same refusals as the constructor, but never "in use".
        """
        store = cls.__new__(cls)
        store._mutex = threading.RLock()
        store._lock_fd = store._db = None
        store.path = os.path.join(state_path, DB_NAME)
        store.state_dir = statedir.StateDir(state_path) if os.path.isdir(state_path) else None
        try:
            store._db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            ran_here = False
            if store.state_dir is not None:
                store.state_dir.check_names(_NAMES)
                ran_here = store.state_dir.exists(LOCK_NAME) and store.state_dir.exists(
                    identity.FILE_NAME
                )
                if store.state_dir.exists(DB_NAME):
                    store._copy_from_disk()
            store._open(ran_here, accept_empty, mark=False)
        except sqlite3.Error as exc:
            store.close()
            raise errors.StateError(path=store.path, reason=str(exc)) from exc
        except BaseException:
            store.close()
            raise
        return store

    def _copy_from_disk(self):
        # Read-only, creating nothing. While an agent runs (its -wal exists)
        # through SQLite's shared memory, which sees every commit; otherwise
        # as an immutable file, since a read-only open would leave -wal and
        # -shm files behind.
        live = self.state_dir.exists(DB_NAME + "-wal")
        uri = f"file:{urllib.parse.quote(self.path)}?mode=ro" + ("" if live else "&immutable=1")
        source = sqlite3.connect(uri, uri=True)
        try:
            source.backup(self._db)
        finally:
            source.close()

    def _connect(self):
        """Connect to the database file, created 0600 from its first byte
        (SQLite gives the -wal and -shm files the same mode).

        SQLite opens the database by path and follows a link there (its
        SQLITE_OPEN_NOFOLLOW flag is out of reach of Python's sqlite3, and
        it has no such URI parameter); its -wal, -shm and -journal it opens
        O_NOFOLLOW itself. So the file is opened here first, without
        following links, and SQLite's file must be that one before anything
        is written to it.
        """
        fd = self.state_dir.open(DB_NAME, os.O_CREAT | os.O_RDWR)
        try:
            os.fchmod(fd, 0o600)
            checked = os.fstat(fd)
        finally:
            os.close(fd)
        # Used only under the tracker lock, from whichever thread holds it.
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            opened = os.stat(db.execute("PRAGMA database_list").fetchone()[2])
        except BaseException:
            db.close()
            raise
        if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            db.close()
            raise errors.StateError(
                path=self.path,
                reason="was replaced while rtagent opened it; something else writes to the "
                "state directory. Find out what, then start rtagent again",
            )
        return db

    def _open(self, ran_here, accept_empty, mark=True):
        """Create, migrate or check the schema, then the store's marker."""
        tables = {
            name
            for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            self._refuse_if_lost(ran_here, accept_empty)  # before the first write
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        if not tables:
            with self._transaction():
                self._create()
        else:
            found = self._found_version(tables)
            if found > SCHEMA_VERSION:
                raise errors.StateError(
                    path=self.path,
                    reason=f"schema version {found} is newer than this rtagent "
                    f"understands ({SCHEMA_VERSION}); run the newer rtagent",
                )
            if found < SCHEMA_VERSION:
                with self._transaction():
                    self._migrate(found)
                LOG.info(
                    "State store %s migrated from schema %d to %d", self.path, found, SCHEMA_VERSION
                )
        if mark:
            self._mark()

    def _found_version(self, tables):
        found = self.get_meta("schema_version") if "meta" in tables else None
        if found is None:
            # Version 1 set the version after creating its tables, in a second
            # transaction: tables without a version are that layout.
            return 1
        try:
            return int(found)
        except ValueError:
            raise errors.StateError(
                path=self.path, reason=f"unreadable schema version {found!r}"
            ) from None

    def _refuse_if_lost(self, ran_here, accept_empty):
        if self.state_dir is None:
            return  # a copy of a directory that does not exist yet
        marker = identity.read_store_marker(self.state_dir)
        if marker is None and not ran_here:
            return  # a first start (perhaps beside nova's compute_id)
        was = (
            f"store {marker} was here"
            if marker
            else f"{LOCK_NAME} and {identity.FILE_NAME} show rtagent ran here"
        )
        if accept_empty:
            LOG.warning(
                "State store %s is missing or empty but %s: starting with no claims, "
                "as --accept-empty-state asks",
                self.path,
                was,
            )
            return
        raise errors.StateError(
            path=self.path,
            reason=f"is missing or empty, but {was}: its claims would be lost. Restore it "
            "from a backup, or start once with `rtagent run --accept-empty-state` to begin "
            "with no claims (see docs/operations.md)",
        )

    def _create(self):
        for statement in _CREATE:
            self._db.execute(statement)
        self._set_meta_rows(
            (("schema_version", str(SCHEMA_VERSION)), (_STORE_ID_KEY, str(uuidlib.uuid4())))
        )

    def _migrate(self, found):
        """Bring a version 1-5 store to this version: from 1-3, copy every
        row into the tables of 4; 4 to 5 and 5 to 6 change only the version.
        Transaction held: a crash anywhere in it leaves the old store as it
        was."""
        if found < 4:
            for statement in _COMPLETE_OLD + _MIGRATE:
                self._db.execute(statement)
        meta = [("schema_version", str(SCHEMA_VERSION))]
        if self.get_meta(_STORE_ID_KEY) is None:
            meta.append((_STORE_ID_KEY, str(uuidlib.uuid4())))
        self._set_meta_rows(meta)

    def _mark(self):
        """Write the marker that says this directory has a store (after the
        store's commit: a crash between the two is repaired here next time)."""
        store_id = self.get_meta(_STORE_ID_KEY)
        if store_id is None:  # removed by hand: the store is still this one
            store_id = str(uuidlib.uuid4())
            self.set_meta(_STORE_ID_KEY, store_id)
        marker = identity.read_store_marker(self.state_dir)
        if marker == store_id:
            return
        if marker is not None:
            LOG.warning(
                "State store %s is store %s, not %s as %s said; recording the store found",
                self.path,
                store_id,
                marker,
                identity.STORE_FILE_NAME,
            )
        identity.write_store_marker(self.state_dir, store_id)

    def _release_lock(self):
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

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

    def _set_meta_rows(self, pairs):
        """Set (key, value) pairs; a None value deletes the key. Transaction held."""
        for key, value in pairs:
            if value is None:
                self._db.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                self._db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value)
                )

    def get_meta(self, key):
        with self._mutex:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key, value):
        """Set (or, with None, delete) one metadata key; durable on return."""
        self.apply(None, Changes(meta=((key, value),)))

    def delete_meta(self, key):
        self.set_meta(key, None)

    def load_instances(self, node_uuid):
        """Every instance tracked on ``node_uuid``, sorted by UUID.

        :raises StateError: a row is unreadable or cannot be believed
            (:mod:`rtagent.tracker.rows`).
        """
        return self._load("instances", node_uuid, Instance.from_dict)

    def load_migrations(self, node_uuid):
        """Every move recorded on ``node_uuid``, sorted by UUID.

        :raises StateError: as :meth:`load_instances`.
        """
        return self._load("migrations", node_uuid, Migration.from_dict)

    def _load(self, table, node_uuid, make):
        """``make(body)`` of each row of ``table`` of ``node_uuid``, its
        body checked against :mod:`rtagent.tracker.rows` first."""
        try:
            with self._mutex:
                rows = self._db.execute(
                    _SELECT_ROWS[table], (MAX_ROW_CHARS, MAX_ROW_CHARS, node_uuid)
                ).fetchall()
        except sqlite3.Error as exc:
            raise errors.StateError(path=self.path, reason=str(exc)) from exc
        values = []
        for key, too_long, text in rows:
            if too_long:
                reason = f"longer than {MAX_ROW_CHARS} characters"
            else:
                try:
                    body = json.loads(text)
                except RecursionError:
                    reason = "not valid JSON: nested too deeply"
                except (ValueError, TypeError) as exc:
                    reason = f"not valid JSON: {exc}"
                else:
                    reason = rows_check.problem(table, key, body)
            if reason is None:
                try:
                    values.append(make(body))
                    continue
                except (ValueError, KeyError, TypeError, errors.TrackerError) as exc:
                    reason = excerpt.clip(str(exc), 200)
            raise errors.StateError(
                path=self.path,
                reason=f"{table} row {excerpt.clip(str(key), 80)} of node {node_uuid}: {reason}. "
                + rows_check.ROW_HELP,
            )
        return values

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

    # Why the last durable write failed; None since a write succeeded.
    _write_failure = None

    @property
    def write_failure(self):
        """None, or the reason (str) the last :meth:`apply` failed, e.g.
        ``"database or disk is full"``; the next successful one clears it.
        Read by health checks from any thread."""
        return self._write_failure

    def apply(self, node_uuid, changes):
        """Write a :class:`rtagent.tracker.state.Changes` of ``node_uuid``
        in ONE transaction; rows of other nodes are never touched. Its
        ``meta`` pairs are written as given (a None value deletes the key).

        Durable when this returns; on error nothing of it was written.

        :raises StateError: the write failed.
        """
        try:
            with self._transaction():
                self._apply(node_uuid, changes)
        except sqlite3.Error as exc:
            self._write_failure = str(exc) or type(exc).__name__
            raise errors.StateError(path=self.path, reason=str(exc)) from exc
        self._write_failure = None

    def _apply(self, node_uuid, changes):
        put = "INSERT OR REPLACE INTO {} (node_uuid, uuid, body) VALUES (?, ?, ?)"
        delete = "DELETE FROM {} WHERE node_uuid = ? AND uuid = ?"
        for instance in changes.put_instances:
            self._db.execute(put.format("instances"), (node_uuid, instance.uuid, _dump(instance)))
        for uuid in changes.delete_instances:
            self._db.execute(delete.format("instances"), (node_uuid, uuid))
        for migration in changes.put_migrations:
            self._db.execute(
                put.format("migrations"), (node_uuid, migration.uuid, _dump(migration))
            )
        for uuid in changes.delete_migrations:
            self._db.execute(delete.format("migrations"), (node_uuid, uuid))
        for uuid in changes.put_released:
            self._db.execute(
                "INSERT OR REPLACE INTO released (node_uuid, uuid) VALUES (?, ?)",
                (node_uuid, uuid),
            )
        for uuid in changes.delete_released:
            self._db.execute(delete.format("released"), (node_uuid, uuid))
        self._set_meta_rows(changes.meta)

    def put_instance(self, node_uuid, instance):
        """Insert or replace one instance of ``node_uuid``; durable on return."""
        self.apply(node_uuid, Changes(put_instances=(instance,)))

    def delete_instance(self, node_uuid, instance_uuid):
        """Forget one instance of ``node_uuid``; durable on return."""
        self.apply(node_uuid, Changes(delete_instances=(instance_uuid,)))

    def close(self):
        """Close the database and release the state directory. Idempotent."""
        if self._db is not None:
            self._db.close()
        self._release_lock()
        if self.state_dir is not None:
            self.state_dir.close()


# json.dumps(..., sort_keys=True) makes a new encoder at each call; this
# one writes the same text.
_ENCODE = json.JSONEncoder(sort_keys=True).encode


def _dump(record):
    return _ENCODE(record.to_dict())
