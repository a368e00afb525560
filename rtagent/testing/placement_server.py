# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""Run a real OpenStack Placement process on loopback for tests and benchmarks.

Example::

    with PlacementServer() as placement:
        client = placement.admin_adapter()
        client.get("/resource_providers")

The server speaks real HTTP at ``placement.endpoint`` with ``noauth2``
(token ``admin``), keeps its database in a private SQLite file and is served
by :mod:`rtagent.testing.placement_wsgi`, one request at a time.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping

from keystoneauth1 import adapter, loading, session

from rtagent.testing.proc import tail

START_TIMEOUT_S = 30.0
DB_SYNC_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
_POLL_S = 0.05


class PlacementServerError(RuntimeError):
    """The Placement process could not be prepared or started.

    The message includes the tail of the relevant log.
    """


def _manage_command() -> list[str]:
    """The argv prefix that runs placement-manage from this interpreter's environment."""
    script = os.path.join(os.path.dirname(sys.executable), "placement-manage")
    if os.access(script, os.X_OK):
        return [script]
    # The 16.0.0 wheel has no placement.cmd.manage.__main__, so call main() directly.
    return [
        sys.executable,
        "-c",
        "import sys; from placement.cmd.manage import main; sys.exit(main())",
    ]


def admin_adapter(
    endpoint: str, microversion: str = "1.39", adapter_class: type = adapter.Adapter
) -> adapter.Adapter:
    """A keystoneauth1 Adapter for a noauth2 Placement at ``endpoint`` (a
    process or the in-process fixture) with the ``admin`` token; errors are
    returned, not raised. ``adapter_class``: an Adapter subclass to make."""
    # noauth2 takes the token as the user name; "admin" is not a secret.
    auth = loading.get_plugin_loader("admin_token").load_from_options(
        endpoint=endpoint,
        token="admin",  # noqa: S106
    )
    return adapter_class(
        session.Session(auth=auth),
        service_type="placement",
        endpoint_override=endpoint,
        default_microversion=microversion,
        raise_exc=False,
    )


class PlacementServer:
    """One Placement process on 127.0.0.1; a context manager.

    :param workdir: directory for placement.conf, the SQLite database, the log,
        the pidfile and the portfile. ``None`` creates a private temporary
        directory that :meth:`stop` removes; a given directory is kept.
    :param db: ``'sqlite'`` for a fresh ``placement.db`` in ``workdir``, or an
        SQLAlchemy URL used verbatim (the caller owns that database).
    :param conf_extra: ``{section: {option: value}}`` added to placement.conf,
        e.g. ``{'DEFAULT': {'debug': 'true'}}``.
    :param request_log: keep placement's per-request INFO log lines.
    :param db_sync: run ``placement-manage db sync`` before launching (~1.2 s,
        mostly imports). ``False`` leaves the schema to the server's own
        ``sync_on_startup``, which is faster.

    Attributes after :meth:`start`: ``endpoint`` (``'http://127.0.0.1:PORT'``),
    ``port``, ``pid``, ``log_path``, ``workdir``, and ``timings`` (seconds:
    ``db_sync`` (if run), ``start`` = launch to first 200 on ``GET /``, and ``stop``
    once stopped).
    """

    def __init__(
        self,
        workdir: str | None = None,
        db: str = "sqlite",
        conf_extra: Mapping[str, Mapping[str, str]] | None = None,
        request_log: bool = False,
        db_sync: bool = True,
    ) -> None:
        self._own_workdir = workdir is None
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="rtagent-placement-"))
        self.db = db
        self.conf_extra = conf_extra or {}
        self.request_log = request_log
        self.db_sync = db_sync
        self.conf_path = os.path.join(self.workdir, "placement.conf")
        self.log_path = os.path.join(self.workdir, "placement.log")
        self.pidfile = os.path.join(self.workdir, "placement.pid")
        self.portfile = os.path.join(self.workdir, "placement.port")
        self.endpoint: str | None = None
        self.port: int | None = None
        self.pid: int | None = None
        self.timings: dict[str, float] = {}
        self._proc: subprocess.Popen | None = None
        # The port _launch binds (0: the OS chooses); start_again's.
        self._bind_port = 0
        # How the last stop() ended the process: "SIGTERM", "SIGKILL" or
        # "exited" (it had already); None before one.
        self.stopped_by = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> PlacementServer:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Write the config, sync the database, launch and wait for ``GET /`` = 200.

        :param timeout: seconds to wait for the first 200 after launch.
        :raises PlacementServerError: db sync failed, or the process exited or
            did not answer within ``timeout``; the process is stopped and an
            owned workdir removed before raising.
        """
        if self._proc is not None:
            raise PlacementServerError("already started")
        self.port = self.endpoint = self.pid = None
        self.timings = {}
        try:
            os.makedirs(self.workdir, exist_ok=True)
            self._write_conf()
            if self.db_sync:
                self._db_sync()
            self._launch()
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the process, SIGKILL it after ``timeout`` seconds; idempotent.

        Signals only the PID this object started. Removes the workdir if this
        object created it.
        """
        proc, self._proc = self._proc, None
        if proc is not None:
            t0 = time.monotonic()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                # A paused (SIGSTOPped) process keeps SIGTERM pending until continued.
                proc.send_signal(signal.SIGCONT)
                try:
                    proc.wait(timeout)
                    self.stopped_by = "SIGTERM"
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    self.stopped_by = "SIGKILL"
            else:
                self.stopped_by = "exited"
            self.timings["stop"] = time.monotonic() - t0
        if self._own_workdir and os.path.isdir(self.workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def start_again(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start a stopped server again on the port it had, over the same
        database (an outage its clients outlive: their endpoint holds).

        :raises PlacementServerError: as :meth:`start`; also when it was
            never started.
        """
        if self.port is None:
            raise PlacementServerError("never started: no port to start again on")
        if self._proc is not None:
            raise PlacementServerError("already running")
        self._bind_port = self.port
        try:
            self._launch()
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        finally:
            self._bind_port = 0

    def pause(self) -> None:
        """SIGSTOP the process: connections are accepted by the kernel but not answered."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the process after :meth:`pause`."""
        self._signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        """True while the started process has not exited."""
        return self._proc is not None and self._proc.poll() is None

    # -- clients -----------------------------------------------------------

    def admin_adapter(self, microversion: str = "1.39") -> adapter.Adapter:
        """A keystoneauth1 Adapter with the ``admin`` token; errors are returned, not raised."""
        if self.endpoint is None:
            raise PlacementServerError("not started")
        return admin_adapter(self.endpoint, microversion)

    # -- internals ---------------------------------------------------------

    def _signal(self, signum: int) -> None:
        if not self.running:
            raise PlacementServerError("not running")
        self._proc.send_signal(signum)

    def _write_conf(self) -> None:
        if self.db == "sqlite":
            connection = "sqlite:///" + os.path.join(self.workdir, "placement.db")
        elif "://" in self.db:
            connection = self.db
        else:
            raise ValueError(f"db must be 'sqlite' or an SQLAlchemy URL, not {self.db!r}")
        sections: dict[str, dict[str, str]] = {
            "DEFAULT": {},
            "api": {"auth_strategy": "noauth2"},
            "placement_database": {"connection": connection, "sync_on_startup": "true"},
        }
        for section, options in self.conf_extra.items():
            sections.setdefault(section, {}).update(options)
        lines = []
        for section, options in sections.items():
            lines.append(f"[{section}]")
            lines.extend(f"{key} = {value}" for key, value in options.items())
            lines.append("")
        with open(self.conf_path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))

    def _db_sync(self) -> None:
        sync_log = os.path.join(self.workdir, "db-sync.log")
        t0 = time.monotonic()
        with open(sync_log, "wb") as log:
            try:
                rc = subprocess.run(
                    [*_manage_command(), "--config-file", self.conf_path, "db", "sync"],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=DB_SYNC_TIMEOUT_S,
                    check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                rc = None
        self.timings["db_sync"] = time.monotonic() - t0
        if rc != 0:
            status = "timed out" if rc is None else f"exited with status {rc}"
            raise PlacementServerError(
                f"placement-manage db sync {status}; tail of {sync_log}:\n{tail(sync_log)}"
            )

    def _launch(self) -> None:
        for stale in (self.portfile, self.pidfile):
            if os.path.exists(stale):
                os.unlink(stale)
        cmd = [
            sys.executable,
            "-m",
            "rtagent.testing.placement_wsgi",
            "--portfile",
            self.portfile,
            "--host",
            "127.0.0.1",
            "--parent-pid",
            str(os.getpid()),
            "--port",
            str(self._bind_port),
        ]
        if self.request_log:
            cmd.append("--request-log")
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=self.workdir)
        self._t_launch = time.monotonic()
        with open(self.log_path, "ab") as log:
            # Own session: a terminal's Ctrl-C or a job-control signal aimed at
            # the test run does not reach the server behind stop()'s back.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.pid = self._proc.pid
        with open(self.pidfile, "w", encoding="ascii") as f:
            f.write(f"{self.pid}\n")

    def _wait_ready(self, timeout: float) -> None:
        deadline = self._t_launch + timeout
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise PlacementServerError(
                    f"placement process {self.pid} exited with status {rc} during start; "
                    f"tail of {self.log_path}:\n{tail(self.log_path)}"
                )
            if self.port is None:
                self.port = self._read_port()
                if self.port is not None:
                    self.endpoint = f"http://127.0.0.1:{self.port}"
            if self.endpoint is not None and self._root_ok():
                self.timings["start"] = time.monotonic() - self._t_launch
                return
            if time.monotonic() >= deadline:
                raise PlacementServerError(
                    f"placement process {self.pid} did not answer GET / with 200 within "
                    f"{timeout:.0f} s; tail of {self.log_path}:\n{tail(self.log_path)}"
                )
            time.sleep(_POLL_S)

    def _read_port(self) -> int | None:
        try:
            with open(self.portfile, encoding="ascii") as f:
                return int(f.read().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _root_ok(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2) as resp:  # noqa: S310
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False
