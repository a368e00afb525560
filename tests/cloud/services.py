"""The processes of the test cloud: each one started here, its PID in a
pidfile, its output in a log file under the test's directory, stopped by
that PID (SIGTERM, then SIGKILL), never by name.

A process started with ``hostname=`` runs in a UTS namespace of its own
(``unshare --uts``, then ``hostname``): libvirt's test driver names its host
after the machine's hostname, so each cloud host's agent and compute
service get the host's own name. Every process also dies with the test
process should that be killed (``PR_SET_PDEATHSIG``), so none outlives a
crashed run.
"""

import ctypes
import os
import signal
import subprocess
import time

STOP_TIMEOUT_S = 20.0
TAIL_LINES = 30
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # In the child before exec; kept across the execs of unshare and sh.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ServiceExited(AssertionError):
    """A service the cloud needs exited (the message has its log's tail)."""


class Service:
    """One process of the cloud. ``start`` and ``stop`` may alternate; the
    log is appended to across restarts."""

    def __init__(self, name, argv, logdir, env=None, hostname=None):
        self.name = name
        self.argv = list(argv)
        self.env = env
        self.hostname = hostname
        self.log_path = os.path.join(logdir, f"{name}.log")
        self.pidfile = os.path.join(logdir, f"{name}.pid")
        self.proc = None
        self.timings = {}

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self):
        if self.running:
            raise RuntimeError(f"{self.name} is running already")
        argv = self.argv
        if self.hostname is not None:
            argv = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"']
            argv += [self.hostname, *self.argv]
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} start: {' '.join(argv)}\n".encode())
            log.flush()
            # The thread that starts a process must outlive it (the death
            # signal follows the thread): the test's main thread does.
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl call
            )
        with open(self.pidfile, "w") as f:
            f.write(f"{self.proc.pid}\n")
        self.timings["started"] = time.monotonic()
        return self

    def check(self):
        """:raises ServiceExited: the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ServiceExited(
                f"{self.name} (pid {self.proc.pid}) exited with status "
                f"{self.proc.returncode}; last lines of {self.log_path}:\n{self.tail()}"
            )

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM by PID, SIGKILL after ``timeout`` s; the seconds it took."""
        proc, self.proc = self.proc, None
        if proc is None:
            return 0.0
        t0 = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        took = time.monotonic() - t0
        with open(self.log_path, "ab") as log:
            log.write(
                f"==== {time.strftime('%H:%M:%S')} stopped, status {proc.returncode}\n".encode()
            )
        return took

    def kill(self):
        """SIGKILL by PID at once, as the OOM killer would; :meth:`start`
        starts it again."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait(10)
        if os.path.exists(self.pidfile):
            os.unlink(self.pidfile)
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} killed (SIGKILL)\n".encode())

    def tail(self, lines=TAIL_LINES):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * lines))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def logs(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


def wait_for(predicate, what, bound, services=(), poll=0.5):
    """Call ``predicate`` until it returns something true, within ``bound``
    seconds; return that value.

    :raises ServiceExited: one of ``services`` exited meanwhile.
    :raises AssertionError: ``bound`` passed (the message names ``what``).
    """
    deadline = time.monotonic() + bound
    while True:
        for service in services:
            service.check()
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {bound:.0f} s: {what}")
        time.sleep(poll)


def read_port(portfile):
    try:
        with open(portfile) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None
