"""A private PostgreSQL on loopback for tests and benchmarks.

Example::

    with Postgres() as pg:
        with PlacementServer(db=pg.url("placement")) as placement:
            ...

It runs the Debian packages' binaries (``/usr/lib/postgresql/15/bin``,
installed by ``tools/setup-postgres.sh``) as the ``postgres`` user over a
fresh data directory with trust authentication, listening on 127.0.0.1 and a
free port only. It is stopped by its own PID (``pg_ctl stop``, then SIGKILL of
the postmaster if needed) and its directory is removed. A watcher process
does the same if the process that started it dies without stopping it, so a
killed test run or benchmark leaves no server behind.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from rtagent.testing import ports

BIN_DIR = "/usr/lib/postgresql/15/bin"
USER = "postgres"
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 15

# Run by a child of the starter: once the starter is gone, stop the server
# (immediate mode: nothing in it is worth keeping) and remove its files.
_WATCHER = """
import os, shutil, signal, subprocess, sys, time
parent, pid, data, workdir, pg_ctl = int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:]
while os.getppid() == parent:
    time.sleep(1)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(0)
subprocess.run(["runuser", "-u", "postgres", "--", pg_ctl, "-D", data, "-m", "immediate",
                "-w", "-t", "15", "stop"], capture_output=True, timeout=30, check=False)
try:
    os.kill(pid, signal.SIGKILL)
except ProcessLookupError:
    pass
shutil.rmtree(workdir, ignore_errors=True)
"""


class PostgresError(RuntimeError):
    """PostgreSQL could not be prepared or started (the log tail is included)."""


def missing_requirements():
    """Why a private PostgreSQL cannot run here, or '' if it can."""
    if not os.path.exists(os.path.join(BIN_DIR, "initdb")):
        return f"{BIN_DIR}/initdb not found (run tools/setup-postgres.sh)"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no {USER} user (run tools/setup-postgres.sh)"
    if os.geteuid() != 0:
        return "must run as root to start PostgreSQL as the postgres user"
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (run tools/setup-postgres.sh)"
    return ""


class Postgres:
    """One PostgreSQL server; a context manager. Attributes after
    :meth:`start`: ``port``, ``pid``, ``workdir``, ``log_path``."""

    def __init__(self):
        self.workdir = None
        self.port = None
        self.pid = None
        self.log_path = None
        self._data = None
        self._watcher = None

    def __enter__(self) -> Postgres:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def url(self, database):
        """An SQLAlchemy URL for ``database`` (see :meth:`create_database`)."""
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{database}"

    def start(self):
        """initdb, start, wait until it accepts connections.

        :raises PostgresError: a step failed; everything started is stopped.
        """
        why = missing_requirements()
        if why:
            raise PostgresError(why)
        user = pwd.getpwnam(USER)
        self.workdir = tempfile.mkdtemp(prefix="rtagent-pg-")
        os.chown(self.workdir, user.pw_uid, user.pw_gid)
        self._data = os.path.join(self.workdir, "data")
        self.log_path = os.path.join(self.workdir, "postgres.log")
        self.port = ports.free_port()
        try:
            self._as_postgres(["initdb", "-D", self._data, "-A", "trust", "-U", USER, "-E", "UTF8"])
            options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.workdir}"
            self._as_postgres(
                [
                    "pg_ctl",
                    "-D",
                    self._data,
                    "-l",
                    self.log_path,
                    "-o",
                    options,
                    "-w",
                    "-t",
                    str(START_TIMEOUT_S),
                    "start",
                ]
            )
            self._watch()
        except BaseException:
            self.stop()
            raise

    def restart(self):
        """Restart the server as an operator does (``pg_ctl restart``, fast
        mode: every client's connection is cut), on the same port and data.

        :raises PostgresError: pg_ctl failed.
        """
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.kill()
            watcher.wait()
        self._as_postgres(
            # -l again: without it the server would write to pg_ctl's
            # captured output, and the capture would wait for the server.
            [
                "pg_ctl",
                "-D",
                self._data,
                "-l",
                self.log_path,
                "-m",
                "fast",
                "-w",
                "-t",
                str(START_TIMEOUT_S),
                "restart",
            ]
        )
        self._watch()

    def _watch(self):
        """The postmaster's PID read, and its watcher started."""
        with open(os.path.join(self._data, "postmaster.pid"), encoding="ascii") as f:
            self.pid = int(f.readline())
        self._watcher = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _WATCHER,
                str(os.getpid()),
                str(self.pid),
                self._data,
                self.workdir,
                os.path.join(BIN_DIR, "pg_ctl"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def create_database(self, name):
        self._as_postgres(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                USER,
                "-c",
                f"CREATE DATABASE {name}",
            ]
        )

    def stop(self):
        """Stop the server started here (by its PID) and remove its files."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.kill()
            watcher.wait()
        if self.pid is not None:
            try:
                self._as_postgres(
                    [
                        "pg_ctl",
                        "-D",
                        self._data,
                        "-m",
                        "fast",
                        "-w",
                        "-t",
                        str(STOP_TIMEOUT_S),
                        "stop",
                    ]
                )
            except PostgresError:
                pass
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while _alive(self.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(self.pid):
                os.kill(self.pid, signal.SIGKILL)
            self.pid = None
        if self.workdir and os.path.isdir(self.workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None

    def _as_postgres(self, argv):
        argv = ["runuser", "-u", USER, "--", os.path.join(BIN_DIR, argv[0]), *argv[1:]]
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S + 30,
            check=False,
            cwd=self.workdir,
        )
        if done.returncode != 0:
            tail = ""
            if self.log_path and os.path.exists(self.log_path):
                with open(self.log_path, encoding="utf-8", errors="replace") as f:
                    tail = f.read()[-2000:]
            raise PostgresError(
                f"{' '.join(argv[4:6])} failed ({done.returncode}): "
                f"{done.stderr.strip()[-1000:]}\n{tail}"
            )
        return done.stdout


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours would look alive; the postmaster is pg_ctl's child.
    return True
