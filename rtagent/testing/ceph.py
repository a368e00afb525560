# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Run a private single-node Ceph cluster on loopback for tests.

Example::

    with CephCluster() as ceph:
        ceph.conf_path                  # a ceph.conf for clients
        ceph.create_pool("vms")
        ceph.cli("df", "--format", "json")
        ceph.stop_daemons(("mon",))     # no client reaches the cluster
        ceph.start_daemons(("mon",))    # and back, data and all

One monitor, one manager and one OSD whose store is in memory (``memstore``),
no cephx, every socket on 127.0.0.1 (the monitor on two free ports, the
others in a free range of ports), every file in one private directory.
Each daemon runs in the foreground in a session of its own, started by this
object and stopped by PID (SIGTERM in the order OSD, manager, monitor: an
OSD whose monitor went first hangs for minutes), with SIGKILL after a
timeout, also when the start fails. Needs Debian's ``ceph-mon``,
``ceph-mgr``, ``ceph-osd`` and ``ceph-common`` (``tools/setup-ceph.sh``);
runs as root. Facts and pitfalls: ``docs/rbd.md``, "The test cluster".

The OSD's store lives in memory: an OSD stopped and started again comes
back without its placement groups, and the pools' I/O hangs. An outage that
the cluster recovers from is the monitor's: stopped, no client can connect
(what an agent sees of a cluster that is down); started again, the OSD and
the manager reconnect with their data.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import uuid as uuidlib

from rtagent.testing import ports
from rtagent.testing.proc import tail

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
CLI_TIMEOUT_S = 30.0
# Ports the OSD and the manager may bind (the OSD took 8, the manager 2).
PORT_RANGE = 50
# The OSD's size as it reports it. memstore keeps only what is written, in
# memory; the size is what the cluster offers, so DISK_GB reads as tens of
# GiB while the tests write a few MiB.
DEVICE_BYTES = 48 * 1024**3
_BINARIES = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph", "monmaptool", "rbd")


class CephError(RuntimeError):
    """The cluster could not be started or a command failed (with logs)."""


def missing_requirements():
    """Why a private cluster cannot run here, or '' if it can."""
    missing = [b for b in _BINARIES if shutil.which(b) is None]
    if missing:
        return f"{', '.join(missing)} not installed (run tools/setup-ceph.sh as root)"
    if os.geteuid() != 0:
        return "the private Ceph cluster runs as root"
    return ""


def _port_range(width):
    """A first port P with P..P+width-1 free, below the ephemeral range."""
    first, _ = ports.ephemeral_range()
    for _ in range(200):
        base = random.randint(ports.LOWEST, first - width - 1)
        if all(ports.is_free(p) for p in range(base, base + width)):
            return base
    raise CephError(f"no {width} free consecutive loopback ports")


class CephCluster:
    """One monitor, one manager, one memstore OSD; a context manager.

    :param workdir: the private directory; ``None`` creates a temporary one
        that :meth:`stop` removes (a given one is kept).

    Attributes after :meth:`start`: ``fsid``, ``conf_path``, ``pids`` (name
    -> PID of each running daemon), ``timings`` (``start``, ``stop``).
    """

    def __init__(self, workdir=None):
        self._own_workdir = workdir is None
        self.workdir = os.path.abspath(workdir or tempfile.mkdtemp(prefix="rtagent-ceph-"))
        self.conf_path = os.path.join(self.workdir, "ceph.conf")
        self.fsid = None
        self.osd_id = None
        self.timings = {}
        self._procs = {}

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    @property
    def pids(self):
        return {name: p.pid for name, p in self._procs.items() if p.poll() is None}

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout=START_TIMEOUT_S):
        """Make the cluster (first time) and start its daemons; wait until
        every placement group is active.

        :raises CephError: it did not come up within ``timeout``; whatever
            was started is stopped before raising.
        """
        why = missing_requirements()
        if why:
            raise CephError(why)
        started = time.monotonic()
        try:
            if self.fsid is None:
                self._make()
            else:
                self.start_daemons(("mon", "mgr", "osd"), timeout)
        except BaseException:
            self.stop(remove=False)
            raise
        self.timings["start"] = time.monotonic() - started

    def stop(self, remove=None):
        """Stop every daemon by PID; remove an owned workdir (unless
        ``remove`` is False). Idempotent."""
        self.stop_daemons()
        if (remove if remove is not None else self._own_workdir) and os.path.isdir(self.workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def stop_daemons(self, names=("osd", "mgr", "mon"), timeout=STOP_TIMEOUT_S):
        """Stop the daemons ``names`` (``osd``, ``mgr``, ``mon``), in the
        order OSD, manager, monitor."""
        started = time.monotonic()
        stopping = bool(self.pids)
        for name in ("osd", "mgr", "mon"):
            if name in names:
                _stop(self._procs.pop(name, None), timeout)
        if stopping:
            self.timings["stop"] = time.monotonic() - started

    def start_daemons(self, names=("mon",), timeout=START_TIMEOUT_S):
        """Start the stopped daemons ``names`` of this cluster again; wait
        until it is active (see the module's note on the OSD)."""
        argv = {
            "mon": ("ceph-mon", "-i", "a"),
            "mgr": ("ceph-mgr", "-i", "x"),
            "osd": ("ceph-osd", "-i", str(self.osd_id)),
        }
        for name in ("mon", "mgr", "osd"):
            if name in names and name not in self.pids:
                self._launch(name, *argv[name])
        self._wait_active(timeout)

    # -- what tests use ----------------------------------------------------

    def cli(self, *args, binary="ceph", timeout=CLI_TIMEOUT_S, input=None):
        """Run ``binary`` (``ceph``, ``rbd``, ``rados``) against the cluster.

        :returns: its stdout.
        :raises CephError: it failed or timed out (stderr in the message).
        """
        cmd = [binary, "-c", self.conf_path, *args]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, input=input, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise CephError(f"{' '.join(cmd)} timed out after {timeout} s") from exc
        if done.returncode != 0:
            raise CephError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def df(self):
        """``ceph df --format json``, decoded."""
        return json.loads(self.cli("df", "--format", "json"))

    def create_pool(self, name, pg_num=8):
        """A replicated pool of one copy, initialised for RBD."""
        self.cli("osd", "pool", "create", name, str(pg_num), str(pg_num))
        self.cli("pool", "init", name, binary="rbd")
        self._wait_active(START_TIMEOUT_S)

    def write_object(self, pool, name, size):
        """Store ``size`` bytes under object ``name`` (the pool's ``stored``
        grows by that much)."""
        path = os.path.join(self.workdir, "object.bin")
        with open(path, "wb") as f:
            f.write(os.urandom(size))
        try:
            self.cli("-p", pool, "put", name, path, binary="rados")
        finally:
            os.unlink(path)

    # -- internals ---------------------------------------------------------

    def _make(self):
        self.fsid = str(uuidlib.uuid4())
        for sub in ("run", "log", "mon", "mgr", "osd", "crash"):
            os.makedirs(os.path.join(self.workdir, sub), mode=0o700, exist_ok=True)
        v2, v1 = ports.free_port(), ports.free_port()
        while v1 == v2:
            v1 = ports.free_port()
        mon_host = f"[v2:127.0.0.1:{v2},v1:127.0.0.1:{v1}]"
        self._write_conf(mon_host, _port_range(PORT_RANGE))
        monmap = os.path.join(self.workdir, "monmap")
        _run(["monmaptool", "--create", "--fsid", self.fsid, "--addv", "a", mon_host, monmap])
        _run(["ceph-mon", "-c", self.conf_path, "--mkfs", "-i", "a", "--monmap", monmap])
        self._launch("mon", "ceph-mon", "-i", "a")
        self._launch("mgr", "ceph-mgr", "-i", "x")
        osd_uuid = str(uuidlib.uuid4())
        self.osd_id = int(self.cli("osd", "new", osd_uuid).strip())
        self._osd_uuid = osd_uuid
        self._make_osd_store()
        self._launch("osd", "ceph-osd", "-i", str(self.osd_id))
        self._wait_active(START_TIMEOUT_S)

    def _make_osd_store(self):
        data = os.path.join(self.workdir, "osd", f"ceph-{self.osd_id}")
        shutil.rmtree(data, ignore_errors=True)
        os.makedirs(data, mode=0o700)
        _run(
            [
                "ceph-osd",
                "-c",
                self.conf_path,
                "-i",
                str(self.osd_id),
                "--mkfs",
                "--osd-uuid",
                self._osd_uuid,
            ]
        )

    def _write_conf(self, mon_host, port_base):
        d = self.workdir
        settings = {
            "fsid": self.fsid,
            "mon host": mon_host,
            "mon initial members": "a",
            "public addr": "127.0.0.1",
            "cluster addr": "127.0.0.1",
            "ms bind ipv6": "false",
            "ms bind port min": str(port_base),
            "ms bind port max": str(port_base + PORT_RANGE - 1),
            "auth cluster required": "none",
            "auth service required": "none",
            "auth client required": "none",
            "auth allow insecure global id reclaim": "false",
            "osd pool default size": "1",
            "osd pool default min size": "1",
            "mon allow pool size one": "true",
            "mon warn on pool no redundancy": "false",
            "osd crush chooseleaf type": "0",
            "osd pool default pg num": "8",
            "osd pool default pgp num": "8",
            "osd pool default pg autoscale mode": "off",
            "osd objectstore": "memstore",
            "memstore device bytes": str(DEVICE_BYTES),
            # The disks here are fuller than Ceph's defaults like.
            "mon data avail warn": "1",
            "mon data avail crit": "0",
            "run dir": f"{d}/run",
            "admin socket": f"{d}/run/$cluster-$name.asok",
            "pid file": f"{d}/run/$name.pid",
            "log file": f"{d}/log/$name.log",
            "mon data": f"{d}/mon/$cluster-$id",
            "mgr data": f"{d}/mgr/$cluster-$id",
            "osd data": f"{d}/osd/$cluster-$id",
            "keyring": f"{d}/keyring",
            "crash dir": f"{d}/crash",
            # Without it a client waits 300 s for a monitor that is down.
            "client mount timeout": "10",
        }
        with open(self.conf_path, "w") as f:
            f.write("[global]\n")
            for key, value in settings.items():
                f.write(f"{key} = {value}\n")
        open(os.path.join(d, "keyring"), "a").close()

    def _launch(self, name, binary, *args):
        log = open(os.path.join(self.workdir, "log", f"{name}.out"), "ab")
        try:
            # A session of its own: a signal to the test's process group
            # (a timeout's) must not reach the daemons.
            self._procs[name] = subprocess.Popen(
                [binary, "-c", self.conf_path, "-f", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()

    def _wait_active(self, timeout):
        """Until the OSD is up and every placement group is active."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise CephError(f"ceph {name} exited ({proc.returncode}): {self._logs(name)}")
            try:
                status = json.loads(self.cli("status", "--format", "json", timeout=15))
            except (CephError, ValueError) as exc:
                last = str(exc)
            else:
                osds = status.get("osdmap", {})
                osds = osds.get("osdmap", osds)  # nested in some releases
                pgs = status.get("pgmap", {})
                states = {s["state_name"]: s["count"] for s in pgs.get("pgs_by_state", [])}
                total = pgs.get("num_pgs", 0)
                mgr_up = status.get("mgrmap", {}).get("available", True)
                if (
                    osds.get("num_up_osds") == 1
                    and mgr_up
                    and total == sum(c for s, c in states.items() if s.startswith("active"))
                ):
                    return
                last = f"osds up {osds.get('num_up_osds')}, pgs {states} of {total}"
            time.sleep(0.5)
        raise CephError(f"cluster not active within {timeout} s ({last}): {self._logs('osd')}")

    def _logs(self, name):
        return tail(os.path.join(self.workdir, "log", f"{name}.out"), 1500)


def _run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise CephError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")


def _stop(proc, timeout):
    """SIGTERM ``proc`` and wait; SIGKILL its session's group after
    ``timeout``. Always waits, so no zombie is left."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
            return
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
