# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Run a real libvirtd + virtlogd (QEMU driver) for integration tests.

Example::

    with Libvirtd() as daemon:
        conn = libvirt.open(daemon.uri)          # read-write, for the test
        agent_uri = daemon.ro_uri                # what the agent opens

Both daemons run in the foreground as children of this process, so they are
stopped by PID (SIGTERM, then SIGKILL), also when a test fails. Their sockets
live in a private directory (``libvirtd.conf``'s ``unix_sock_dir``), so they
never take over a system libvirtd's sockets. What cannot be private in
libvirtd's privileged (root) mode: the QEMU driver's state under
``/run/libvirt/qemu`` and ``/var/lib/libvirt/qemu``, and virtlogd's socket
``/run/libvirt/virtlogd-sock``. So only one such daemon can run on a machine;
:meth:`Libvirtd.start` refuses to start when another one holds the QEMU
driver, instead of disturbing it. Two test runs on one machine (two
``make test`` side by side) take turns: a start first takes a machine-wide
lock (:data:`MACHINE_LOCK`, held until :meth:`stop`) and waits, up to
:data:`MACHINE_WAIT_S`, for another run's daemon to stop. Guests made
through :meth:`create_guest` are transient (nothing is written under
/etc/libvirt) and are destroyed, and their QEMU processes killed by PID, on
:meth:`stop`.

Needs root and the packages installed by ``tools/setup-libvirtd.sh``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time

from rtagent.testing.proc import tail

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
QEMU_DRIVER_LOCK = "/run/libvirt/qemu/driver.pid"
VIRTLOGD_SOCK = "/run/libvirt/virtlogd-sock"
QEMU_STATE_DIR = "/run/libvirt/qemu"
# Taken by every private daemon of this module for its whole life: another
# test run's start waits on it instead of finding the QEMU driver held. The
# wait guards against a hang only: a make test's real-libvirtd tests hold it
# for about 30 s (2 minutes beside three other test runs).
MACHINE_LOCK = "/run/lock/rtagent-testing-libvirtd.lock"
MACHINE_WAIT_S = 900.0
# libvirt log priority (1 debug .. 4 error); 1 to see why a start is slow.
LOG_LEVEL = os.environ.get("RTAGENT_LIBVIRTD_LOG_LEVEL", "3")
BINARIES = ("libvirtd", "virtlogd", "qemu-system-x86_64")
# virDomainUndefineFlags: managed save, snapshot metadata, NVRAM,
# checkpoint metadata (1 | 2 | 4 | 16).
_UNDEFINE_ALL = 1 | 2 | 4 | 16


class LibvirtdError(RuntimeError):
    """The daemons could not be started (the message says why)."""


def missing_requirements():
    """Return why a real libvirtd cannot run here, or '' if it can.

    Checks root, the binaries and the ``libvirt-qemu`` account that
    ``tools/setup-libvirtd.sh`` provides.
    """
    if os.geteuid() != 0:
        return "needs root (libvirtd's QEMU driver in privileged mode)"
    missing = [b for b in BINARIES if _which(b) is None]
    if missing:
        return f"missing {', '.join(missing)}; run tools/setup-libvirtd.sh"
    try:
        import pwd

        pwd.getpwnam("libvirt-qemu")
    except KeyError:
        return "no libvirt-qemu user; run tools/setup-libvirtd.sh"
    if not os.path.exists("/etc/libvirt/qemu.conf"):
        return "no /etc/libvirt/qemu.conf (QEMU as root); run tools/setup-libvirtd.sh"
    return ""


def _which(name):
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def qemu_driver_busy():
    """Tell whether another libvirtd holds the QEMU driver's state lock."""
    try:
        fd = os.open(QEMU_DRIVER_LOCK, os.O_RDONLY)
    except OSError:
        return False
    try:
        # libvirt holds a write lock (virPidFileAcquire) while it runs.
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def take_machine_lock(path=MACHINE_LOCK, wait_s=MACHINE_WAIT_S, poll_s=0.2):
    """The file descriptor of ``path``, locked (flock) for this process.

    Waits up to ``wait_s`` while another process holds it; its PID is in the
    file.

    :raises LibvirtdError: still held after ``wait_s`` (the holder named).
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                    raise LibvirtdError(
                        f"another test run's libvirtd (the process {holder or '?'}) held "
                        f"{path} for {wait_s:.0f} s; only one can run on a machine"
                    ) from None
                time.sleep(poll_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def guest_xml(name, memory_mib=64, vcpus=1, disk_path=None):
    """A tiny TCG guest: no NIC, serial on a pty, sits in the BIOS."""
    disk = ""
    if disk_path:
        disk = (
            "<disk type='file' device='disk'><driver name='qemu' type='qcow2'/>"
            f"<source file='{disk_path}'/><target dev='vda' bus='virtio'/></disk>"
        )
    return f"""<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>{memory_mib}</memory>
  <vcpu>{vcpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    {disk}
    <serial type='pty'><target port='0'/></serial>
    <memballoon model='virtio'/>
  </devices>
</domain>"""


class Libvirtd:
    """A private libvirtd + virtlogd; a context manager.

    :param base_dir: directory for sockets, config and logs (default: a new
        temporary directory, removed on :meth:`stop`).
    :param hostname: libvirtd runs in a UTS namespace of its own with this
        hostname (what ``getHostname`` answers: nova's
        ``hypervisor_hostname``), as a compute host of a test cloud.
    :param owns_every_domain: every domain on this daemon is the caller's,
        made by others than :meth:`create_guest` too (nova's libvirt
        driver): :meth:`stop` destroys and undefines them all, so that no
        persistent definition under /etc/libvirt/qemu outlives the test.
        The machine lock makes the daemon the machine's only one.
    """

    def __init__(
        self,
        base_dir=None,
        machine_wait_s=MACHINE_WAIT_S,
        *,
        hostname=None,
        owns_every_domain=False,
    ):
        self._own_dir = base_dir is None
        self._machine_wait_s = machine_wait_s
        self.hostname = hostname
        self.owns_every_domain = owns_every_domain
        self._machine_lock = None
        self.dir = base_dir or tempfile.mkdtemp(prefix="rtagent-libvirtd-")
        self.sock_dir = os.path.join(self.dir, "run")
        self.conf_path = os.path.join(self.dir, "libvirtd.conf")
        self.log_path = os.path.join(self.dir, "libvirtd.log")
        self.virtlogd_log = os.path.join(self.dir, "virtlogd.log")
        self.prefix = f"rtagent-it-{os.getpid()}-"
        self.libvirtd = None
        self.virtlogd = None
        self._guest_pids = {}

    # -- URIs ------------------------------------------------------------
    @property
    def uri(self):
        """Read-write URI (for the test itself to make guests)."""
        return f"qemu+unix:///system?socket={self.sock_dir}/libvirt-sock"

    @property
    def ro_uri(self):
        """Read-only URI, as the agent opens it."""
        return f"qemu+unix:///system?socket={self.sock_dir}/libvirt-sock-ro"

    # -- lifecycle -------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=START_TIMEOUT_S):
        """Start virtlogd (if none serves its socket) and libvirtd; wait until
        libvirtd answers ``getCapabilities``.

        :raises LibvirtdError: requirements missing, another libvirtd holds the
            QEMU driver, or the daemon did not answer in time (with its log).
        """
        try:
            why = missing_requirements()
            if why:
                raise LibvirtdError(why)
            if self._machine_lock is None:
                self._machine_lock = take_machine_lock(wait_s=self._machine_wait_s)
            if qemu_driver_busy():
                raise LibvirtdError(
                    f"another libvirtd holds the QEMU driver ({QEMU_DRIVER_LOCK}); "
                    "stop it first, it is not ours to stop"
                )
            os.makedirs(self.sock_dir, exist_ok=True)
            os.makedirs("/var/log/libvirt/qemu", exist_ok=True)
            with open(self.conf_path, "w") as f:
                f.write(
                    f'unix_sock_dir = "{self.sock_dir}"\n'
                    'unix_sock_ro_perms = "0777"\n'
                    'unix_sock_rw_perms = "0700"\n'
                    'auth_unix_ro = "none"\n'
                    'auth_unix_rw = "none"\n'
                    f'log_outputs = "{LOG_LEVEL}:file:{self.log_path}"\n'
                )
            if not self._virtlogd_serving():
                self.virtlogd = self._spawn(
                    ["virtlogd", "-p", os.path.join(self.dir, "virtlogd.pid")],
                    self.virtlogd_log,
                )
            self.start_libvirtd(timeout)
        except BaseException:
            # Whatever was started is stopped, the lock let go and an owned
            # directory removed: also after a refusal, which starts nothing.
            self.stop()
            raise

    def start_libvirtd(self, timeout=START_TIMEOUT_S):
        """(Re)start libvirtd alone; running guests survive a restart."""
        argv = ["libvirtd", "-f", self.conf_path, "-p", os.path.join(self.dir, "libvirtd.pid")]
        if self.hostname is not None:
            # unshare and sh exec in turn: the PID is libvirtd's.
            argv = [
                "unshare",
                "--uts",
                "--",
                "sh",
                "-c",
                'hostname "$0" && exec "$@"',
                self.hostname,
                _which("libvirtd") or "libvirtd",
                *argv[1:],
            ]
        self.libvirtd = self._spawn(argv, os.path.join(self.dir, "libvirtd.stderr"))
        self._wait_ready(timeout)

    def stop_libvirtd(self):
        """Stop libvirtd by PID (guests keep running, as on a real restart)."""
        proc, self.libvirtd = self.libvirtd, None
        _terminate(proc)

    def stop(self):
        """Destroy our guests, stop both daemons by PID, remove the directory."""
        try:
            self._destroy_guests()
        finally:
            self.stop_libvirtd()
            proc, self.virtlogd = self.virtlogd, None
            _terminate(proc)
            for pid in self._guest_pids.values():
                _kill_pid(pid)
            self._guest_pids.clear()
            if self._own_dir:
                shutil.rmtree(self.dir, ignore_errors=True)
            self._release_machine()

    def _release_machine(self):
        fd, self._machine_lock = self._machine_lock, None
        if fd is not None:
            os.close(fd)

    # -- guests ----------------------------------------------------------
    def create_guest(self, conn, short_name, **kw):
        """Start a transient TCG guest named ``<prefix><short_name>``.

        :returns: the ``virDomain``.
        """
        name = self.prefix + short_name
        dom = conn.createXML(guest_xml(name, **kw), 0)
        pid = self._read_guest_pid(name)
        if pid:
            self._guest_pids[name] = pid
        return dom

    def destroy_guest(self, conn, dom):
        name = dom.name()
        dom.destroy()
        self._guest_pids.pop(name, None)

    def _destroy_guests(self):
        if self.libvirtd is None or self.libvirtd.poll() is not None:
            return
        import libvirt

        try:
            conn = libvirt.open(self.uri)
        except libvirt.libvirtError:
            return
        try:
            for dom in conn.listAllDomains(0):
                name = dom.name()
                if not (self.owns_every_domain or name.startswith(self.prefix)):
                    continue
                try:
                    dom.destroy()
                    self._guest_pids.pop(name, None)
                except libvirt.libvirtError:
                    # Shut off already, or QEMU not answering: killed by
                    # its PID in stop() (a guest this daemon started).
                    pid = self._read_guest_pid(name) if self.owns_every_domain else None
                    if pid:
                        self._guest_pids[name] = pid
                if self.owns_every_domain:
                    with contextlib.suppress(libvirt.libvirtError):
                        dom.undefineFlags(_UNDEFINE_ALL)
        finally:
            conn.close()

    def _read_guest_pid(self, name):
        try:
            with open(os.path.join(QEMU_STATE_DIR, f"{name}.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    # -- helpers ---------------------------------------------------------
    def _spawn(self, argv, log_path):
        argv = [_which(argv[0]) or argv[0], *argv[1:]]
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def _virtlogd_serving(self):
        import socket

        if not os.path.exists(VIRTLOGD_SOCK):
            return False
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(VIRTLOGD_SOCK)
            except OSError:
                return False
        return True

    def _wait_ready(self, timeout):
        import libvirt

        from rtagent.virt.libvirt.connection import silence_libvirt

        silence_libvirt()
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.libvirtd.poll() is not None:
                raise LibvirtdError(
                    f"libvirtd exited with {self.libvirtd.returncode}:\n"
                    + tail(os.path.join(self.dir, "libvirtd.stderr"))
                    + tail(self.log_path)
                )
            try:
                conn = libvirt.open(self.uri)
                try:
                    conn.getCapabilities()
                    return
                finally:
                    conn.close()
            except libvirt.libvirtError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise LibvirtdError(
            f"libvirtd did not answer within {timeout:.0f} s ({last}):\n" + tail(self.log_path)
        )


def _terminate(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_TIMEOUT_S)


def _kill_pid(pid):
    # A QEMU process left behind by a failed test: ours by record, by PID.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
