"""Placement as operators run it: several gunicorn worker processes over
PostgreSQL, on loopback, for fleet benchmarks.

Example::

    with placement_on_postgres(workers=4) as placement:
        placement.admin_adapter().get("/resource_providers")
        placement.worker_pids()          # read their CPU from /proc

Or by hand (prints the endpoint and the PIDs, serves until Ctrl-C, SIGTERM
or ``--seconds``)::

    python -m rtagent.testing.placement_gunicorn --workers 4 --seconds 600

The gunicorn master listens on a socket bound here (127.0.0.1, a free port)
and handed over as ``fd://``, so there is no race for the port, and a
:meth:`GunicornPlacement.restart` after :meth:`GunicornPlacement.halt` serves
on the same one. Files in the private work directory: ``placement.conf``,
``placement.log``, ``placement.pid`` (the master) and ``workers/worker-N.pid``
(one per worker, written once it has built the app, removed when it exits;
:mod:`rtagent.testing.gunicorn_conf`). Every process is stopped by its own
PID; the master also ends when its parent dies, and after ``max_seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import signal
import socket
import subprocess
import sys
import time

from rtagent.testing import proc
from rtagent.testing.placement_server import PlacementServer, PlacementServerError
from rtagent.testing.postgres import Postgres

GRACEFUL_TIMEOUT_S = 5
STOP_TIMEOUT_S = 10.0


class GunicornPlacement(PlacementServer):
    """Placement served by a gunicorn master and ``workers`` processes.

    :param db: an SQLAlchemy URL (PostgreSQL: concurrent writers on SQLite
        fail with "database is locked"). The schema is synced once before
        the workers start; they do not sync it themselves.
    :param workers: worker processes; ``threads`` per worker (1: gunicorn's
        ``sync`` workers, more: ``gthread``).
    :param preload: the master builds the app before it listens and forks
        its workers (uWSGI's default, gunicorn's ``--preload``): a (re)start
        answers in about the time of one import, and refuses connections
        until then. Without it each worker builds its own after forking and
        the master accepts connections meanwhile (they wait).
    :param max_seconds: the master shuts down after this long (None: never).

    Other parameters and attributes are :class:`PlacementServer`'s; ``pid``
    is the master's.
    """

    def __init__(
        self,
        db,
        *,
        workers=4,
        threads=1,
        workdir=None,
        conf_extra=None,
        request_log=False,
        preload=False,
        max_seconds=None,
    ):
        extra = {"placement_database": {"sync_on_startup": "false"}}
        for section, options in (conf_extra or {}).items():
            extra.setdefault(section, {}).update(options)
        super().__init__(workdir=workdir, db=db, conf_extra=extra, request_log=request_log)
        self.workers = workers
        self.threads = threads
        self.preload = preload
        self.max_seconds = max_seconds
        self.piddir = os.path.join(self.workdir, "workers")
        self._bound_port = None

    # -- processes ---------------------------------------------------------

    def worker_pids(self):
        """PIDs of the workers serving now (from their pidfiles)."""
        pids = []
        for path in glob.glob(os.path.join(self.piddir, "worker-*.pid")):
            try:
                with open(path, encoding="ascii") as f:
                    pids.append(int(f.read()))
            except (FileNotFoundError, ValueError):
                continue
        return sorted(pids)

    def pids(self):
        """The master's and the workers' PIDs."""
        return ([self.pid] if self.running else []) + self.worker_pids()

    def cpu_by_pid(self):
        """{pid: CPU seconds so far} for the master and every worker."""
        return {pid: proc.cpu_seconds(pid) for pid in self.pids()}

    def halt(self, timeout=STOP_TIMEOUT_S):
        """Stop the master and its workers (gunicorn's graceful stop: the
        listening socket closes first, so clients are refused), keeping the
        work directory and the port for :meth:`restart`. Idempotent."""
        # (pid, start time): a PID that is reused later is not ours.
        workers = [(pid, proc.start_time(pid)) for pid in self.worker_pids()]
        process, self._proc = self._proc, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # Workers end on their own once the master is gone; any that did
        # not within the timeout is killed, if it is still ours.
        deadline = time.monotonic() + timeout
        while any(proc.start_time(p) == t for p, t in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid, started in workers:
            if started is not None and proc.start_time(pid) == started:
                os.kill(pid, signal.SIGKILL)
        for path in glob.glob(os.path.join(self.piddir, "worker-*.pid")):
            os.unlink(path)

    def restart(self, timeout=60.0):
        """Serve again on the same port after :meth:`halt`.

        :raises PlacementServerError: it did not come up (then halted).
        """
        if self._proc is not None:
            raise PlacementServerError("still running")
        try:
            self._launch()
            self._wait_ready(timeout)
        except BaseException:
            self.halt()
            raise

    def stop(self, timeout=STOP_TIMEOUT_S):
        self.halt(timeout)
        super().stop(timeout)

    def pause(self):
        """SIGSTOP the master and every worker."""
        for pid in self.pids():
            os.kill(pid, signal.SIGSTOP)

    def resume(self):
        for pid in self.pids():
            os.kill(pid, signal.SIGCONT)

    # -- internals ---------------------------------------------------------

    def _launch(self):
        os.makedirs(self.piddir, exist_ok=True)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self._bound_port or 0))
            self._bound_port = self.port = listener.getsockname()[1]
            self.endpoint = f"http://127.0.0.1:{self.port}"
            fd = listener.fileno()
            cmd = [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "python:rtagent.testing.gunicorn_conf",
                "--bind",
                f"fd://{fd}",
                "--workers",
                str(self.workers),
                "--threads",
                str(self.threads),
                "--graceful-timeout",
                str(GRACEFUL_TIMEOUT_S),
                "--pid",
                self.pidfile,
                "--error-logfile",
                self.log_path,
                "--no-control-socket",
                *(["--preload"] if self.preload else []),
                "placement.wsgi.api:application",
            ]
            env = dict(
                os.environ,
                OS_PLACEMENT_CONFIG_DIR=self.workdir,
                RTAGENT_GUNICORN_PIDDIR=self.piddir,
                RTAGENT_PARENT_PID=str(os.getpid()),
                RTAGENT_MAX_SECONDS=str(self.max_seconds or ""),
                RTAGENT_REQUEST_LOG="1" if self.request_log else "0",
            )
            self._t_launch = time.monotonic()
            with open(self.log_path, "ab") as log:
                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    pass_fds=(fd,),
                    start_new_session=True,
                )
        finally:
            # Only gunicorn holds the socket now: once it stops, connections
            # are refused.
            listener.close()
        self.pid = self._proc.pid

    def _wait_ready(self, timeout):
        """``GET /`` answers 200 and every worker has built the app."""
        super()._wait_ready(timeout)
        deadline = self._t_launch + timeout
        while len(self.worker_pids()) < self.workers:
            if self._proc.poll() is not None or time.monotonic() >= deadline:
                raise PlacementServerError(
                    f"{len(self.worker_pids())} of {self.workers} gunicorn workers ready "
                    f"within {timeout:.0f} s; tail of {self.log_path}:\n{proc.tail(self.log_path)}"
                )
            time.sleep(0.05)
        self.timings["start"] = time.monotonic() - self._t_launch


@contextlib.contextmanager
def placement_on_postgres(workers=4, threads=1, **kw):
    """A private PostgreSQL and a :class:`GunicornPlacement` over it; both
    stopped on exit, also on failure. The server's ``postgres`` attribute
    is the :class:`~rtagent.testing.postgres.Postgres`."""
    with Postgres() as pg:
        pg.create_database("placement")
        server = GunicornPlacement(pg.url("placement"), workers=workers, threads=threads, **kw)
        with server as placement:
            placement.postgres = pg
            yield placement


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=600.0, help="stop after this long")
    args = parser.parse_args(argv)
    stop = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.append(1))
    with placement_on_postgres(args.workers, args.threads, max_seconds=args.seconds + 30) as p:
        print(f"endpoint={p.endpoint} token=admin", flush=True)
        print(f"master_pid={p.pid} worker_pids={','.join(map(str, p.worker_pids()))}", flush=True)
        print(f"postgres_pid={p.postgres.pid} workdir={p.workdir}", flush=True)
        deadline = time.monotonic() + args.seconds
        while not stop and time.monotonic() < deadline:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
