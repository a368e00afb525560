"""gunicorn server hooks for :mod:`rtagent.testing.placement_gunicorn`.

Loaded by the gunicorn master as ``-c python:rtagent.testing.gunicorn_conf``;
everything else comes on the command line. Read from the environment:

- ``RTAGENT_GUNICORN_PIDDIR``: each worker writes ``worker-<age>.pid`` there
  once forked (its PID, whose /proc the benchmarks read); the master removes
  the file when that worker exits.
- ``RTAGENT_PARENT_PID``: the master shuts down (as on SIGTERM) once this
  process is no longer its parent, so a killed benchmark leaves no server.
- ``RTAGENT_MAX_SECONDS``: the master shuts down after this long at most.
- ``RTAGENT_REQUEST_LOG``: ``1`` keeps Placement's per-request INFO log.
"""

import logging
import os
import signal
import threading
import time

_WATCH_S = 0.5


def _pidfile(worker):
    piddir = os.environ.get("RTAGENT_GUNICORN_PIDDIR")
    return os.path.join(piddir, f"worker-{worker.age}.pid") if piddir else None


def when_ready(server):
    """In the master, once it listens: watch the parent and the lifetime."""
    parent = int(os.environ.get("RTAGENT_PARENT_PID") or 0)
    limit = float(os.environ.get("RTAGENT_MAX_SECONDS") or 0)
    if not parent and not limit:
        return
    deadline = time.monotonic() + limit if limit else None

    def watch():
        while (not parent or os.getppid() == parent) and (
            deadline is None or time.monotonic() < deadline
        ):
            time.sleep(_WATCH_S)
        server.log.warning("parent gone or lifetime over: shutting down")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def post_fork(server, worker):
    """In the new worker: write its pidfile (atomically)."""
    path = _pidfile(worker)
    if path is None:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{os.getpid()}\n")
    os.replace(tmp, path)


def post_worker_init(worker):
    """In the worker, after Placement's app was built (and its logging set
    up): drop the per-request INFO lines unless asked for."""
    if os.environ.get("RTAGENT_REQUEST_LOG") != "1":
        logging.getLogger("placement.requestlog").setLevel(logging.WARNING)


def child_exit(server, worker):
    """In the master, after a worker exited: remove its pidfile."""
    path = _pidfile(worker)
    if path is not None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
