"""rtagent's host audit beside nova's own libvirt driver, on a real libvirtd.

A private libvirtd (:class:`rtagent.testing.libvirtd.Libvirtd`, the
machine's one real daemon, taken in turn with other test runs) with 0, 8
and 32 running guests (64 MiB, made by ``Libvirtd.create_guest``: TCG,
``<domain type='qemu'>``, also where /dev/kvm exists; the output says
which). At each size, in one process:

- *rtagent*: ``rtagent.virt.libvirt.LibvirtDriver(uri,
  instances_path).read_host()`` in steady state (after a first reading), on
  the daemon's read-write URI, as ``rtagent run`` reads it
  (docs/libvirt-audit.md);
- *nova*: ``nova.virt.libvirt.driver.LibvirtDriver`` as nova-compute 34
  builds it (``nova.conf.CONF`` with ``[libvirt] connection_uri`` the
  daemon's read-write URI, ``virt_type = qemu``, ``[DEFAULT]
  instances_path`` and ``state_path`` in a temporary directory;
  ``init_host`` called, as ``ComputeManager.init_host`` does before the
  first periodic; its object queries answered empty by
  :class:`NoInstancesConductor`), then what its resource tracker asks it
  at each periodic: ``get_available_resource(nodename)`` and
  ``update_provider_tree(tree, nodename)`` on a ``ProviderTree`` whose
  root was made once.

Prints key=value lines, the last a summary:

    virt_type=qemu guest_accel=tcg kvm_device=yes|no guest_mib=64 libvirtd_wait_s=W
    guests=N side=rtagent|nova daemon_calls=D client_calls=C seen=S
        cpu_ms=T own_cpu_ms=P libvirtd_cpu_ms=L qemu_cpu_ms=Q wall_ms=W
    guests=N side=S calls_by_method=Class.method:count,...
    guests=N cpu_ratio_vs_nova=R (reported at 0 and 8)
    cpu_ratio_vs_nova_n32=R ..._spread=LO..HI ..._reps=K target<=0.1 verdict=V
    own_cpu_ratio_vs_nova_n32=R ... judged=no, host_cpu_ratio_vs_nova_n32=R ... judged=no
    summary calls_constant=yes|no rtagent_daemon_calls=A,B,C
        nova_daemon_calls=X,Y,Z cpu_ratio_vs_nova_n32=R ... PASS|MISS|VOID

*Calls* are counted alike for both sides by instrumentation: every public
method of every libvirt-python object class (``virConnect``,
``virDomain``, ``virNodeDevice`` ...) wrapped with a counter (outermost
call only), in a counting pass of 3 audits per side after the timed
rounds, so the wrappers cost the timed rounds nothing. ``daemon_calls``
are those that reach libvirtd; ``client_calls`` those libvirt answers from
the client-side handle with no message to the daemon (``virDomain.name``,
``UUIDString``, ``UUID``, ``ID``, ``virNodeDevice.name``, ``connect``,
``c_pointer``: :data:`CLIENT_SIDE`), reported, not judged: rtagent asks
each domain handle ``getAllDomainStats`` returned for its UUID and name.

*CPU* per audit is this process's ``time.process_time`` (both drivers run
here) plus libvirtd's own CPU (``/proc/<pid>/task/*/schedstat``, every
thread, nanoseconds), read just outside each call;
``qemu_cpu_ms``, the guests' QEMU main threads (which answer libvirtd's
monitor queries, e.g. the balloon and block stats of
``getAllDomainStats``), is reported, not judged: the guests' own timers
land there too. Also reported at 32 guests: ``own_cpu_ratio_vs_nova_n32``
(this process only) and ``host_cpu_ratio_vs_nova_n32`` (this process,
libvirtd and the QEMU main threads). The two sides run in turn
(``benchmarks.common.spread.interleaved``: A B, B A ...), :data:`REPS`
rounds per size after one unmeasured reading each; each round gives one
ratio, and
``cpu_ratio_vs_nova_n32`` is the median of the rounds' ratios at 32
guests with its 95% confidence interval as ``_spread`` (PASS when the
median is at most 0.1 and the spread's top at most 0.11, MISS when the
median is above 0.1 and the spread's bottom at least 0.09, VOID otherwise).

Targets: rtagent's ``daemon_calls`` the same at 0, 8 and 32 guests (else
MISS), its CPU at 32 guests at most 0.1x nova's. VOID: a side saw another
number of guests than were started (rtagent's view's domains; nova's
``vcpus_used``, one vCPU a guest), a side made no call or its 3 counted
audits differ, the daemon could not start, or the run outlasted
``--max-seconds``.

Negative control: ``--per-guest-calls`` empties rtagent's per-domain caches
before each audit (each domain's XML and info read again, one call or more
per guest), which must MISS on ``calls_constant``.

The script runs anywhere (``make bench`` starts it with .venv's python): it
runs itself again with .venv-nova's python (nova lives there), bounded by
``--max-seconds``. Needs root and ``tools/setup-libvirtd.sh``'s packages;
the daemon's start waits (up to 15 minutes) while another run holds it.
"""

import argparse
import collections
import contextlib
import functools
import inspect
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.common import spread  # noqa: E402
from benchmarks.common.verdict import run as run_benchmark  # noqa: E402

NOVA_PYTHON = os.path.join(ROOT, ".venv-nova", "bin", "python")
SIZES = (0, 8, 32)
# Rounds per size (a round at 32 guests is about 0.1 s of CPU here); only
# the largest size's ratio is judged, the others are reported.
REPS = {0: 15, 8: 15, 32: 61}
COUNTING_AUDITS = 3
TARGET = 0.1
GUEST_MIB = 64
# A bound against a hang only: the daemon's start may wait up to 15
# minutes for another test run's daemon.
MAX_SECONDS = 1500.0
# libvirt-python methods answered from the client-side handle, with no
# message to libvirtd (libvirt's virDomainGetName, virDomainGetUUID(String),
# virDomainGetID, virNodeDeviceGetName return the handle's fields;
# connect and c_pointer are Python only).
CLIENT_SIDE = frozenset(
    {
        "virDomain.name",
        "virDomain.UUID",
        "virDomain.UUIDString",
        "virDomain.ID",
        "virDomain.connect",
        "virDomain.c_pointer",
        "virConnect.c_pointer",
        "virNodeDevice.name",
        "virNodeDevice.connect",
        "virNodeDevice.c_pointer",
    }
)


def emit(line):
    """One output line on file descriptor 1, whatever nova did to stdout."""
    os.write(1, (line + "\n").encode())


# -- pure helpers (tests/unit/test_bench_hypervisor_audit.py) ----------------


def split_calls(counts):
    """(daemon calls, client-side calls) of a ``{"Class.method": n}`` count."""
    client = sum(n for name, n in counts.items() if name in CLIENT_SIDE)
    return sum(counts.values()) - client, client


def schedstat_ns(text):
    """The run time (ns) in one ``/proc/.../schedstat`` file's text."""
    return int(text.split()[0])


def stat_ticks(text):
    """utime + stime (clock ticks) of one ``/proc/<pid>/stat`` file's text
    (the command name may hold spaces and parentheses)."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def format_counts(counts, limit=12):
    """``Class.method:n,...``, most frequent first, at most ``limit``."""
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return ",".join(f"{name}:{n}" for name, n in top) or "-"


def decide(daemon_calls, seen, judged, sizes=SIZES):
    """The run's verdict and its void reasons.

    :param daemon_calls: ``{side: {n: calls}}``.
    :param seen: ``{side: {n: guests the side saw}}``.
    :param judged: the CPU gate's :class:`benchmarks.common.spread.Judged`.
    :returns: (verdict, calls_constant, [void reasons]).
    """
    voids = []
    for side, by_n in seen.items():
        for n in sizes:
            if by_n.get(n) != n:
                voids.append(f"{side}_saw_{by_n.get(n)}_of_{n}")
    for side, by_n in daemon_calls.items():
        for n in sizes:
            if by_n.get(n) is None:
                voids.append(f"{side}_calls_unsteady_at_{n}")
            elif not by_n[n]:
                voids.append(f"{side}_no_calls_at_{n}")
    constant = len({daemon_calls["rtagent"].get(n) for n in sizes}) == 1
    verdicts = [judged.verdict, spread.PASS if constant else spread.MISS]
    if voids:
        verdicts.append(spread.VOID)
    verdict = spread.combine(verdicts)
    # A count missed is a MISS whatever else: combine puts MISS first.
    return verdict, constant, voids


# -- the parent: the child under nova's python --------------------------------


def parent_main(args):
    started = time.time()
    # SIGTERM (a CI job cancelled) unwinds like Ctrl-C: the child, which
    # owns the daemon, is stopped by the finally clause below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if not os.access(args.nova_python, os.X_OK):
        print(f"nova_venv=missing python={args.nova_python} (make nova-venv builds it)")
        print("summary void=no_nova_venv VOID", flush=True)
        return 1
    cmd = [args.nova_python, os.path.abspath(__file__), "--child"]
    if args.per_guest_calls:
        cmd.append("--per-guest-calls")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True
    )
    seen = {"summary": False}

    def relay():
        for line in proc.stdout:
            seen["summary"] = seen["summary"] or line.startswith("summary ")
            sys.stdout.write(line)
            sys.stdout.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(1.0, started + args.max_seconds - time.time()))
    except subprocess.TimeoutExpired:
        _stop_child(proc)
        reader.join(10)
        print(f"summary void=timeout max_seconds={args.max_seconds:g} VOID", flush=True)
        return 1
    finally:
        if proc.poll() is None:
            _stop_child(proc)
    reader.join(10)
    if not seen["summary"]:
        print(f"summary void=child_exit_{rc} VOID", flush=True)
        return 1
    return rc


def _stop_child(proc):
    """SIGTERM the child alone (its finally stops the daemon, which is in
    its session, and the guests), then SIGKILL its whole session after
    60 s (``Libvirtd`` would then leave the guests' QEMU processes)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(15)


# -- the child: the daemon, the guests, both drivers --------------------------


class CallCounter:
    """Counts calls of every public method of libvirt-python's classes.

    Instrumentation, not a mock: each wrapper calls the real method. Only
    the outermost call counts (a method calling another is one call), and
    only while :attr:`on`.
    """

    def __init__(self, module):
        self._module = module
        self._originals = []
        self._local = threading.local()
        self.on = False
        self.counts = collections.Counter()

    def install(self):
        for cls_name in dir(self._module):
            cls = getattr(self._module, cls_name)
            if not (isinstance(cls, type) and cls_name.startswith("vir")):
                continue
            if issubclass(cls, BaseException):
                continue
            for attr, fn in list(vars(cls).items()):
                if attr.startswith("_") or not inspect.isfunction(fn):
                    continue
                self._originals.append((cls, attr, fn))
                setattr(cls, attr, self._wrap(f"{cls_name}.{attr}", fn))

    def uninstall(self):
        for cls, attr, fn in reversed(self._originals):
            setattr(cls, attr, fn)
        self._originals.clear()

    def _wrap(self, name, fn):
        local, counter = self._local, self

        @functools.wraps(fn)
        def counted(*args, **kwargs):
            depth = getattr(local, "depth", 0)
            if depth == 0 and counter.on:
                counter.counts[name] += 1
            local.depth = depth + 1
            try:
                return fn(*args, **kwargs)
            finally:
                local.depth = depth

        return counted


class ProcCpu:
    """CPU seconds a process has used: every thread's schedstat, or
    utime + stime where schedstat is missing; ``main_only``: the thread
    whose id is the pid (a QEMU's main loop, which answers its monitor)."""

    def __init__(self, pid, main_only=False):
        self.pid = pid
        self.main_only = main_only
        self.source = "schedstat" if os.path.exists(f"/proc/{pid}/schedstat") else "stat"

    def __call__(self):
        try:
            if self.source == "stat":
                with open(f"/proc/{self.pid}/stat") as f:
                    return stat_ticks(f.read()) / os.sysconf("SC_CLK_TCK")
            if self.main_only:
                with open(f"/proc/{self.pid}/schedstat") as f:
                    return schedstat_ns(f.read()) / 1e9
            total = 0
            for task in os.listdir(f"/proc/{self.pid}/task"):
                with contextlib.suppress(FileNotFoundError):
                    with open(f"/proc/{self.pid}/task/{task}/schedstat") as f:
                        total += schedstat_ns(f.read())
            return total / 1e9
        except FileNotFoundError:
            return 0.0  # the process is gone: nothing more to count


class Side:
    """One driver's audit, measured: CPU of this process and of libvirtd
    (and the guests' QEMU main threads) around each call."""

    def __init__(self, name, audit, libvirtd_cpu):
        self.name = name
        self.audit = audit
        self.libvirtd_cpu = libvirtd_cpu
        self.qemu = []
        self.rounds = []  # (own cpu s, libvirtd cpu s, qemu cpu s, wall s)
        self.seen = None

    def qemu_cpu(self):
        return sum(cpu() for cpu in self.qemu)

    def __call__(self):
        daemon0, qemu0 = self.libvirtd_cpu(), self.qemu_cpu()
        wall0, own0 = time.perf_counter(), time.process_time()
        self.seen = self.audit()
        own1, wall1 = time.process_time(), time.perf_counter()
        daemon1, qemu1 = self.libvirtd_cpu(), self.qemu_cpu()
        self.rounds.append((own1 - own0, daemon1 - daemon0, qemu1 - qemu0, wall1 - wall0))

    def cpu(self):
        """Per round: own + libvirtd CPU seconds (the judged figure)."""
        return [own + daemon for own, daemon, _q, _w in self.rounds]


class NoInstancesConductor:
    """The conductor's answers for a host none of whose guests is a nova
    instance: every list query is empty (``get_available_resource`` asks
    for the instances and block devices of the guests it lists). Any other
    call fails: the only one here, the driver's best-effort host status
    update when it connects, is logged by nova and skipped. No RPC is
    made, so nova's periodic costs less here than in nova-compute."""

    def object_class_action_versions(self, context, objname, objmethod, versions, args, kwargs):
        from nova.objects import base as objects_base

        if objname.endswith("List"):
            cls = objects_base.NovaObjectRegistry.obj_classes()[objname][0]
            return cls(context=context, objects=[])
        raise NotImplementedError(f"no conductor here: {objname}.{objmethod}")

    def object_class_action(self, context, objname, objmethod, objver, args, kwargs):
        raise NotImplementedError(f"no conductor here: {objname}.{objmethod}")

    def object_action(self, context, objinst, objmethod, args, kwargs):
        raise NotImplementedError(f"no conductor here: {objinst.obj_name()}.{objmethod}")


def nova_driver(uri, workdir, virt_type):
    """nova's LibvirtDriver as nova-compute builds it, ``init_host`` done.

    :returns: (driver, nodename).
    """
    from nova import monkey_patch

    monkey_patch.patch(backend="threading")  # as nova/cmd/compute.py

    import nova.conf
    import nova.conf.devices
    import nova.conf.neutron
    import nova.db.main.api
    from nova import config, objects
    from nova.objects import base as objects_base
    from nova.virt import virtapi
    from nova.virt.libvirt import driver

    conf = nova.conf.CONF
    config.parse_args(["nova-compute"], default_config_files=[], configure_db=False, init_rpc=False)
    objects.register_all()
    # As ComputeManager.__init__ (the driver reads [neutron_tunnel]).
    nova.conf.neutron.register_dynamic_opts(conf)
    nova.conf.devices.register_dynamic_opts(conf)
    conf.set_override("compute_driver", "libvirt.LibvirtDriver")
    conf.set_override("connection_uri", uri, "libvirt")
    conf.set_override("virt_type", virt_type, "libvirt")
    conf.set_override("instances_path", os.path.join(workdir, "instances"))
    conf.set_override("state_path", os.path.join(workdir, "state"))
    for path in (conf.instances_path, conf.state_path):
        os.makedirs(path, exist_ok=True)
    # As nova/cmd/compute.py: no database in nova-compute, objects through
    # the conductor, here a stand-in (no conductor runs).
    nova.db.main.api.DISABLE_DB_ACCESS = True
    objects_base.NovaObject.indirection_api = NoInstancesConductor()
    # ComputeVirtAPI needs a ComputeManager; neither call below uses it.
    drv = driver.LibvirtDriver(virtapi.VirtAPI(), read_only=False)
    drv.init_host(host=conf.host)
    (nodename,) = drv.get_available_nodes()
    return drv, nodename


def nova_periodic(drv, nodename):
    """What nova's resource tracker asks the driver at each periodic, with
    the provider tree's root made once (the report client's cache)."""
    from nova.compute import provider_tree

    tree = provider_tree.ProviderTree()
    tree.new_root(nodename, drv._host.get_node_uuid())

    def periodic():
        resources = drv.get_available_resource(nodename)
        drv.update_provider_tree(tree, nodename)
        return resources["vcpus_used"]  # one vCPU a guest

    return periodic


def rtagent_audit(driver, per_guest_calls):
    def audit():
        if per_guest_calls:
            # As audit_cost.py's --forget-domains, and each domain's XML too.
            driver._info_cache.clear()
            driver._hostdev_cache.clear()
            driver._domain_cache.clear()
            driver._domain_reading.clear()
        return len(driver.read_host().domains)

    return audit


def count_calls(counter, side):
    """(counts of the last audit, whether every audit made the same) over
    COUNTING_AUDITS audits of ``side`` (they differ if the host changed)."""
    per_audit = []
    for _ in range(COUNTING_AUDITS):
        counter.counts = collections.Counter()
        counter.on = True
        try:
            side.audit()
        finally:
            counter.on = False
        per_audit.append(dict(counter.counts))
    return per_audit[-1], all(c == per_audit[0] for c in per_audit)


def child_main(args):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    import libvirt

    from rtagent.testing.libvirtd import Libvirtd, missing_requirements
    from rtagent.virt.libvirt import LibvirtDriver

    missing = missing_requirements()
    if missing:
        emit(f"libvirtd=missing reason={'_'.join(missing.split())}")
        emit("summary void=no_libvirtd VOID")
        return 1
    kvm = os.path.exists("/dev/kvm")
    virt_type = "qemu"  # create_guest's guests are TCG
    emit(
        f"virt_type={virt_type} guest_accel=tcg kvm_device={'yes' if kvm else 'no'} "
        f"guest_mib={GUEST_MIB}"
    )
    daemon = Libvirtd()
    waited = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rtagent-bench-hv-") as workdir:
        try:
            daemon.start()
            emit(f"libvirtd_wait_s={time.monotonic() - waited:.1f}")
            return _measure(args, daemon, workdir, virt_type, libvirt, LibvirtDriver)
        finally:
            daemon.stop()


def _measure(args, daemon, workdir, virt_type, libvirt, rtagent_driver_class):
    libvirtd_cpu = ProcCpu(daemon.libvirtd.pid)
    drv, nodename = nova_driver(daemon.uri, workdir, virt_type)
    instances = os.path.join(workdir, "rtagent-instances")
    os.makedirs(instances)
    ours = rtagent_driver_class(daemon.uri, instances)
    sides = {
        "rtagent": Side("rtagent", rtagent_audit(ours, args.per_guest_calls), libvirtd_cpu),
        "nova": Side("nova", nova_periodic(drv, nodename), libvirtd_cpu),
    }
    emit(f"nodename={nodename} cpu_source={libvirtd_cpu.source} control={args.per_guest_calls}")
    counter = CallCounter(libvirt)
    conn = libvirt.open(daemon.uri)
    guests = []
    calls = {side: {} for side in sides}
    seen = {side: {} for side in sides}
    ratios_by_n = {}
    try:
        for n in SIZES:
            started = time.monotonic()
            while len(guests) < n:
                guests.append(daemon.create_guest(conn, f"g{len(guests)}", memory_mib=GUEST_MIB))
            qemu = [ProcCpu(_qemu_pid(dom.name()), main_only=True) for dom in guests]
            for side in sides.values():
                side.rounds = []
                side.qemu = qemu
                side.audit()  # the first reading after the host changed
            setup_s = time.monotonic() - started
            # The first reading above is the warm-up.
            spread.interleaved([sides["rtagent"], sides["nova"]], REPS[n], warmup=0)
            counter.install()
            try:
                for name, side in sides.items():
                    counts, steady = count_calls(counter, side)
                    daemon_calls, client_calls = split_calls(counts)
                    calls[name][n] = daemon_calls if steady else None
                    seen[name][n] = side.seen
                    _report(n, side, daemon_calls, client_calls, steady, setup_s)
                    emit(f"guests={n} side={name} calls_by_method={format_counts(counts)}")
            finally:
                counter.uninstall()
            ratios_by_n[n] = spread.ratios(sides["rtagent"].cpu(), sides["nova"].cpu())
            if n != SIZES[-1]:
                emit(f"guests={n} cpu_ratio_vs_nova={statistics.median(ratios_by_n[n]):.3f}")
    finally:
        conn.close()
        ours.close()
    judged = spread.judge(f"cpu_ratio_vs_nova_n{SIZES[-1]}", ratios_by_n[SIZES[-1]], TARGET)
    emit(judged.line(digits=3))
    # Reported, not judged: where the judged CPU goes.
    rt, nv = sides["rtagent"].rounds, sides["nova"].rounds
    for name, part in (("own", lambda r: r[0]), ("host", lambda r: r[0] + r[1] + r[2])):
        values = spread.ratios([part(r) for r in rt], [part(r) for r in nv])
        shown = spread.judge(f"{name}_cpu_ratio_vs_nova_n{SIZES[-1]}", values, TARGET)
        emit(shown.fields(digits=3) + " judged=no")
    verdict, constant, voids = decide(calls, seen, judged)
    void = f"void={','.join(voids)} " if voids else ""
    emit(
        f"summary calls_constant={'yes' if constant else 'no'} "
        f"rtagent_daemon_calls={','.join(str(calls['rtagent'][n]) for n in SIZES)} "
        f"nova_daemon_calls={','.join(str(calls['nova'][n]) for n in SIZES)} "
        f"{judged.fields(digits=3)} target_ratio={TARGET:g} {void}{verdict}"
    )
    return 0 if verdict == spread.PASS else 1


def _qemu_pid(name):
    from rtagent.testing.libvirtd import QEMU_STATE_DIR

    with open(os.path.join(QEMU_STATE_DIR, f"{name}.pid")) as f:
        return int(f.read().strip())


def _report(n, side, daemon_calls, client_calls, steady, setup_s):
    rounds = side.rounds
    own = statistics.median(r[0] for r in rounds)
    daemon = statistics.median(r[1] for r in rounds)
    qemu = statistics.median(r[2] for r in rounds)
    wall = statistics.median(r[3] for r in rounds)
    cpu = statistics.median(side.cpu())
    emit(
        f"guests={n} side={side.name} daemon_calls={daemon_calls} "
        f"client_calls={client_calls} "
        f"calls_steady={'yes' if steady else 'no'} seen={side.seen} rounds={len(rounds)} "
        f"cpu_ms={cpu * 1e3:.2f} own_cpu_ms={own * 1e3:.2f} "
        f"libvirtd_cpu_ms={daemon * 1e3:.2f} qemu_cpu_ms={qemu * 1e3:.2f} "
        f"wall_ms={wall * 1e3:.2f} setup_s={setup_s:.1f}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--per-guest-calls",
        action="store_true",
        help="negative control: rtagent's per-domain caches emptied before each audit (must MISS)",
    )
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS)
    parser.add_argument("--nova-python", default=NOVA_PYTHON)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args)
    return parent_main(args)


def child_exit(rc):
    """End the child now: nova's driver leaves non-daemon threads (its
    libvirt event and connection-event threads) that would keep the
    interpreter from exiting. The daemon was stopped before this."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc if isinstance(rc, int) else 1)


if __name__ == "__main__":
    if "--child" not in sys.argv[1:]:
        sys.exit(run_benchmark(main))
    try:
        status = run_benchmark(main)
    except SystemExit as exc:  # SIGTERM's handler, after the finally clauses
        status = exc.code
    child_exit(status)
