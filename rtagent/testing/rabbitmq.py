# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Run a private RabbitMQ broker on loopback for tests, the demo and benchmarks.

Example::

    with RabbitMQ() as broker:
        url = broker.transport_url      # rabbit://guest:guest@127.0.0.1:PORT/
        broker.restart()                # same port and data: clients reconnect

Everything lives in one private directory: the Erlang cookie (``HOME``), the
Mnesia database, logs, the config. The broker listens on 127.0.0.1 only, on
a free port, under a node name made from that port, so several can run side
by side and none touches a system broker. Its ``epmd`` is ours too: started
here on a private loopback port (so the broker finds it running and does not
spawn one that would outlive it), and stopped by PID with the broker.

Both processes are started by this object and stopped by PID (SIGTERM, then
SIGKILL), also when the start fails. Needs ``rabbitmq-server``
(``tools/setup-rabbitmq.sh``); it may run as root (the Debian wrappers that
switch to the ``rabbitmq`` user are not used).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

from rtagent.testing import ports
from rtagent.testing.proc import tail

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
EPMD_TIMEOUT_S = 10.0
EPMD_ATTEMPTS = 3
_SBIN_GLOB = "/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin"
_EPMD = ("/usr/bin/epmd", "/usr/lib/erlang/bin/epmd")


class RabbitMQError(RuntimeError):
    """The broker could not be started (the message says why, with its log)."""


def sbin_dir():
    """The unwrapped RabbitMQ scripts' directory, or None if not installed."""
    found = sorted(glob.glob(_SBIN_GLOB))
    return found[-1] if found else None


def missing_requirements():
    """Why a private broker cannot run here, or '' if it can."""
    if sbin_dir() is None:
        return "rabbitmq-server is not installed (run tools/setup-rabbitmq.sh as root)"
    if _epmd_binary() is None:
        return "epmd (erlang) is not installed"
    return ""


def _epmd_binary():
    for path in _EPMD:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("epmd")


def _stop_process(proc, timeout):
    """SIGTERM ``proc``, SIGKILL its process group after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        # The VM leaves helpers (erl_child_setup, inet_gethost) in its group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return
    # A clean exit can still leave a helper behind in the group we created.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class RabbitMQ:
    """One private broker (and its epmd) on 127.0.0.1; a context manager.

    :param workdir: the private directory; ``None`` creates a temporary one
        that :meth:`stop` removes (a given one is kept).

    Attributes after :meth:`start`: ``port``, ``transport_url``,
    ``nodename``, ``pid`` (the Erlang VM), ``epmd_pid``, ``log_path``,
    ``timings`` (``start`` and ``stop`` seconds of the last ones).
    """

    def __init__(self, workdir=None):
        self._own_workdir = workdir is None
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="rtagent-rabbitmq-"))
        self.port = None
        self.epmd_port = None
        self.nodename = None
        self.log_path = os.path.join(self.workdir, "rabbitmq-server.out")
        self.timings = {}
        self._proc = None
        self._epmd = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    @property
    def pid(self):
        return self._proc.pid if self._proc is not None else None

    @property
    def epmd_pid(self):
        return self._epmd.pid if self._epmd is not None else None

    @property
    def transport_url(self):
        return f"rabbit://guest:guest@127.0.0.1:{self.port}/"

    @property
    def running(self):
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout=START_TIMEOUT_S):
        """Start epmd (first time) and the broker; wait until AMQP answers.

        A restarted broker keeps its port, node name and data.

        :raises RabbitMQError: it did not start within ``timeout``; whatever
            was started is stopped before raising.
        """
        why = missing_requirements()
        if why:
            raise RabbitMQError(why)
        if self.running:
            raise RabbitMQError("already started")
        started = time.monotonic()
        try:
            if self.port is None:
                # The Erlang distribution port is AMQP port + 20000.
                self.port = ports.free_port(offset=20000)
                self.nodename = f"rabbit-{self.port}@localhost"
                self._prepare_dir()
            if self._epmd is None or self._epmd.poll() is not None:
                self._start_epmd()
            self._launch()
            self._wait_ready(timeout)
        except BaseException:
            self.stop(keep_epmd=False, remove=False)
            raise
        self.timings["start"] = time.monotonic() - started

    def stop(self, timeout=STOP_TIMEOUT_S, keep_epmd=False, remove=None):
        """Stop the broker by PID; then its epmd unless ``keep_epmd``.

        Idempotent. Removes an owned workdir once everything is stopped,
        unless ``remove`` is False.
        """
        started = time.monotonic()
        proc, self._proc = self._proc, None
        _stop_process(proc, timeout)
        if proc is not None:
            self.timings["stop"] = time.monotonic() - started
        if not keep_epmd:
            epmd, self._epmd = self._epmd, None
            _stop_process(epmd, 5.0)
            if (remove if remove is not None else self._own_workdir) and os.path.isdir(
                self.workdir
            ):
                shutil.rmtree(self.workdir, ignore_errors=True)

    def restart(self, timeout=START_TIMEOUT_S, down_seconds=0.0):
        """Stop the broker, stay down ``down_seconds``, start it again."""
        self.stop(keep_epmd=True)
        time.sleep(down_seconds)
        self.start(timeout)

    # -- internals ---------------------------------------------------------

    def _prepare_dir(self):
        for sub in ("home", "mnesia", "log"):
            os.makedirs(os.path.join(self.workdir, sub), mode=0o700, exist_ok=True)
        with open(os.path.join(self.workdir, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        with open(os.path.join(self.workdir, "rabbitmq.conf"), "w") as f:
            f.write(
                f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
                "loopback_users.guest = true\n"
                # Tests fill a small disk quickly; never block publishers.
                "disk_free_limit.absolute = 1MB\n"
            )

    def env(self):
        """The environment for the broker and for rabbitmqctl against it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.pop("NOTIFY_SOCKET", None)
        d = self.workdir
        env.update(
            {
                "HOME": os.path.join(d, "home"),
                "RABBITMQ_NODENAME": self.nodename,
                "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
                "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(self.port + 20000),
                "RABBITMQ_MNESIA_BASE": os.path.join(d, "mnesia"),
                "RABBITMQ_LOG_BASE": os.path.join(d, "log"),
                "RABBITMQ_PID_FILE": os.path.join(d, "rabbit.pid"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(d, "enabled_plugins"),
                "RABBITMQ_CONFIG_FILE": os.path.join(d, "rabbitmq.conf"),
                "RABBITMQ_CONF_ENV_FILE": "/dev/null",
                "ERL_EPMD_ADDRESS": "127.0.0.1",
                "ERL_EPMD_PORT": str(self.epmd_port),
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": (
                    "-kernel inet_dist_use_interface {127,0,0,1}"
                ),
                # Makes the script exec the VM: our PID is the broker's.
                "RUNNING_UNDER_SYSTEMD": "1",
            }
        )
        return env

    def _start_epmd(self):
        """Start our epmd on a free port; another port if it loses its own.

        The port is chosen free, then given to epmd: something else may bind
        it in between (rtagent.testing.ports), and epmd then exits at once.
        """
        log_path = os.path.join(self.workdir, "epmd.out")
        for _ in range(EPMD_ATTEMPTS):
            self.epmd_port = ports.free_port()
            with open(log_path, "ab") as log:
                self._epmd = subprocess.Popen(
                    [_epmd_binary(), "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                    cwd=self.workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + EPMD_TIMEOUT_S
            while self._epmd.poll() is None:
                if ports.listens(self._epmd.pid, self.epmd_port):
                    return
                if time.monotonic() > deadline:
                    _stop_process(self._epmd, 5.0)
                    raise RabbitMQError(
                        f"epmd did not listen on 127.0.0.1:{self.epmd_port} within "
                        f"{EPMD_TIMEOUT_S:.0f} s:\n{tail(log_path)}"
                    )
                time.sleep(0.05)
        raise RabbitMQError(
            f"epmd exited at start on each of {EPMD_ATTEMPTS} ports (the last 127.0.0.1:"
            f"{self.epmd_port}, exit {self._epmd.returncode}):\n{tail(log_path)}"
        )

    def _launch(self):
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [os.path.join(sbin_dir(), "rabbitmq-server")],
                # Erlang writes crash dumps (MnesiaCore.*, erl_crash.dump)
                # where it runs: in the private directory, not the caller's.
                cwd=self.workdir,
                env=self.env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _wait_ready(self, timeout):
        """Until an AMQP connection opens a channel (the port opens earlier)."""
        import kombu

        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RabbitMQError(
                    f"broker exited with {self._proc.returncode}:\n{tail(self.log_path)}"
                )
            if not ports.is_free(self.port):
                try:
                    url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
                    with kombu.Connection(url, connect_timeout=2) as conn:
                        conn.ensure_connection(max_retries=1, timeout=2)
                        conn.channel().close()
                    return
                except Exception:  # noqa: S110 - not ready yet; keep polling
                    pass
            if time.monotonic() > deadline:
                raise RabbitMQError(
                    f"broker not ready after {timeout:.0f} s:\n{tail(self.log_path)}"
                )
            time.sleep(0.2)
