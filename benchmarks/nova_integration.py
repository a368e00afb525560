"""nova's own ResourceTracker against rtagent's, in nova 34.0.0's own harness.

One run measures three trackers, one after the other, each in a fresh
``ProviderUsageBaseTestCase`` of nova's functional tests (nova's database,
an in-process Placement, the API, conductor and scheduler), with one
compute service per N on ``fake.FakeDriver`` (1,000 vCPUs, 800,000 MiB,
600,000 GiB; host ``host-<N>``):

- ``nova``: nova's ResourceTracker, unchanged;
- ``inprocess``: rtagent's tracker adapter through ``RtagentTrackerFixture``
  in its ``inprocess`` mode (``LocalLink``: the agent's endpoint called in
  the process);
- ``rpc``: the same fixture in its ``rpc`` mode, with the served link built
  here over a real RabbitMQ broker (a private one, started for the run)
  instead of the fixture's ``fake://`` transport: the agent's own
  ``RPCServer`` and ``AgentEndpoint`` on one transport, ``AgentClient`` and
  ``RpcLink`` on another. This is the link the targets judge.

For N = 0, 100 and 1,000, the node's N instances are written straight into
nova's database (``objects.Instance(...).create()``, ACTIVE, the
``m1.tiny`` flavor), with their allocations in Placement as a scheduler
writes them, and one periodic runs (rtagent adopts the instances it does
not hold: one claim each). Then, round by round over the nodes (so that a
slower stretch of the machine falls on every N alike),
``ComputeManager.update_available_resource`` is timed (process CPU,
median of the runs, up to the end of the Placement sync it asks the
agent's prompt sync for), and the time nova's ``compute_resources`` lock is
held during it is summed by a probe: nova's ``utils.synchronized`` calls
``oslo_concurrency.lockutils.lock(name, ...)``, looked up at call time, and
the probe wraps that function. Then new instances are claimed as
ComputeManager claims them (``rt.instance_claim(ctx, instance, nodename,
allocations, limits=None)``), one per node per round, each timed alone
(wall and process CPU); they stay on their node, ACTIVE.

Process CPU is the whole process's: nova's services, the in-process
Placement (wsgi-intercept) and, with rtagent, the agent (and its RPC server
over RabbitMQ) all run in it. Logging runs at INFO, as in production (nova's
harness formats every debug line otherwise). The agents' state directories
are on tmpfs (``--tmpdir``), so a claim's fsync is not a disk's queue.

Targets (the ``rpc`` link against ``nova``): at N=100 the periodic's CPU
<= 0.5 x nova's, its lock hold <= 0.1 x nova's, a claim's p50 wall time
<= nova's, and no claim making more than one call to the agent
(``agent_calls_per_claim``: the claim's reply carries the node's view since
RPC 1.9); at N=1,000 the periodic's CPU <= 1,000 ms and a claim's CPU p50
<= 1.5 x its own at N=100. The in-process link's figures and every absolute
time are printed for reading. VOID: an agent (or nova's tracker) not
holding exactly the instances on the node, a periodic or claim that raised,
no ``compute_resources`` hold seen in nova's periodic, no judged size.

The claim-cost ratio (``fill_cost_ratio_n1000_vs_n100``) is judged by
``benchmarks.common.spread``: the k-th claims at N=1,000 and N=100 ran in
the same round, so each round gives one ratio; the figure is their median,
``_spread`` its 95% confidence interval (x(2)..x(10) of 11 rounds). PASS
within 1.5 with the spread's top within 1.65; MISS above 1.5 with the
spread's bottom above 1.35; VOID otherwise (one earlier run beside a nova
test run read 1.614, ratio of medians, against 1.00-1.20 in the others).
The ratios against nova's tracker compare trackers measured one after the
other (each in its own nova test case), so they cannot be interleaved;
their margins are wide (at 45f1df4: 0.08-0.14 against 0.5, 0.005-0.009
against 0.1, 0.05-0.06 against 1.0) and their control misses by 4x and
more, so they are judged on their value as before.

Negative controls: ``--two-trips`` strips the view from the claims'
replies, as an agent older than 1.9 answers, so that each claim asks for it
again (``get_compute_node``): it must MISS on ``agent_calls_per_claim``, and
its ``claim_p50_ms`` is a claim's cost before 1.9. ``--reclaim-everything``
wraps rtagent's ``reconcile.reconcile`` so that every periodic also claims
every instance on the node again (what the periodic did before it went by
difference): it must MISS.

The script runs anywhere (``make bench`` starts it with .venv's python): it
starts the broker, then runs itself again with .venv-nova's python (nova
and its test fixtures live there), bounded by ``--max-seconds``.
"""

import argparse
import contextlib
import os
import shutil
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
TRACKERS = ("nova", "inprocess", "rpc")
JUDGED = "rpc"
SIZES = (0, 100, 1000)
RATIO_N = 100
SCALE_N = 1000
TARGETS = {
    "periodic_cpu_ratio_vs_nova": 0.5,
    "periodic_lock_ratio_vs_nova": 0.1,
    "claim_p50_ratio_vs_nova": 1.0,
    "periodic_cpu_ms_n1000": 1000.0,
    "fill_cost_ratio_n1000_vs_n100": 1.5,
    "agent_calls_per_claim": 1.0,
}
PERIODIC_RUNS = 5
PERIODIC_RUNS_LARGE = 3  # at N >= SCALE_N
CLAIMS = 11  # per N: the p50 is the 6th
# nova's claims at N >= SCALE_N: each reads every consumer's allocations
# from Placement (8-13 s here at N=1,000), and none is judged.
NOVA_CLAIMS_LARGE = 3
# nova's tracker at N=1,000 is skipped when its part there (instances,
# periodics, claims) would take longer than this, projected linearly from
# its figures at the size before.
NOVA_LARGE_BUDGET_S = 150.0
# A bound against a hang only: a run beside a `make test` took 814 s.
MAX_SECONDS = 1800.0
LOCK_NAME = "compute_resources"
FLAVOR_NAME = "m1.tiny"
IMAGE_REF = "155d900f-4e14-4e4c-a73d-069cbf4541e6"  # GlanceFixture's
PROJECT_ID = "6f70656e737461636b20342065766572"
USER_ID = "8b8d2f1d6f5a4c25b0c4a0b3d2e1f001"
SETTLE_S = 30.0
ALLOCATION_BATCH = 200
# Environment that would change what the child measures: nova's test hook
# (it would add a second fixture), its proof and fault switches, and
# oslotest's capture and debug switches.
_CHILD_ENV_DROP = (
    "RTAGENT_NOVA_TRACKER",
    "RTAGENT_NOVA_PROOF_DIR",
    "RTAGENT_NOVA_FAULT_ONCE",
    "OS_DEBUG",
    "OS_STDOUT_CAPTURE",
    "OS_STDERR_CAPTURE",
    "OS_LOG_CAPTURE",
    "OS_TEST_TIMEOUT",
)


def emit(line):
    """One output line, on file descriptor 1 whatever nova's fixtures did
    to ``sys.stdout``."""
    os.write(1, (line + "\n").encode())


def ms(seconds):
    return seconds * 1000.0


# -- the parent: a broker, and the measuring child under nova's python -------


def parent_main(args):
    started = time.time()
    # SIGTERM (a CI job cancelled) unwinds like Ctrl-C: the child and the
    # broker are stopped by the finally clauses below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if not os.access(args.nova_python, os.X_OK):
        print(f"nova_venv=missing python={args.nova_python} (make nova-venv builds it)")
        print("summary void=no_nova_venv VOID", flush=True)
        return 1
    from rtagent.testing import rabbitmq

    missing = rabbitmq.missing_requirements()
    if missing:
        print(f"rabbitmq=missing reason={'_'.join(missing.split())}")
        print("summary void=no_rabbitmq VOID", flush=True)
        return 1
    broker = rabbitmq.RabbitMQ()
    try:
        broker.start()
        print(f"rabbitmq_start_s={broker.timings.get('start', 0.0):.1f}", flush=True)
        return _run_child(args, broker.transport_url, started)
    finally:
        broker.stop()


def _run_child(args, url, started):
    deadline = started + args.max_seconds
    cmd = [
        args.nova_python,
        os.path.abspath(__file__),
        "--child",
        "--rabbit-url",
        url,
        "--started",
        repr(started),
        "--sizes",
        ",".join(str(n) for n in args.sizes),
        "--periodic-runs",
        str(args.periodic_runs),
        "--claims",
        str(args.claims),
        "--nova-large-budget-s",
        str(args.nova_large_budget_s),
    ]
    if args.quick:
        cmd.append("--quick")
    if args.reclaim_everything:
        cmd.append("--reclaim-everything")
    if args.two_trips:
        cmd.append("--two-trips")
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}
    # A directory of the child's own, removed here: a child killed at the
    # deadline runs no clean-up of its own.
    tmpdir = tempfile.mkdtemp(prefix="rtagent-bench-nova-", dir=args.tmpdir)
    env["TMPDIR"] = tmpdir
    try:
        return _wait_child(args, cmd, env, started, deadline)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _wait_child(args, cmd, env, started, deadline):
    seen = {"summary": False}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT, start_new_session=True
    )

    def relay():
        for line in proc.stdout:
            seen["summary"] = seen["summary"] or line.startswith("summary ")
            sys.stdout.write(line)
            sys.stdout.flush()

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        _stop_child(proc)
        reader.join(10)
        print(f"seconds={time.time() - started:.1f}")
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
    """SIGTERM the child's session (it was started in a new one), SIGKILL
    it after 15 s."""
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


# -- the child: nova's harness, three trackers --------------------------------


class Void(Exception):
    """The measurement did not measure what it says (the reason is the
    message, one token)."""


class LockProbe:
    """Records the holds of one oslo.concurrency lock name taken while
    recording: (seconds from acquisition to release, holder), the holder
    being the function ``synchronized`` wraps."""

    def __init__(self, name):
        self.name = name
        self.recording = False
        self.holds = []

    def wrap(self, real):
        probe = self

        @contextlib.contextmanager
        def lock(name, *args, **kwargs):
            with real(name, *args, **kwargs) as held:
                if name != probe.name or not probe.recording:
                    yield held
                    return
                holder = _holder()
                start = time.perf_counter()
                try:
                    yield held
                finally:
                    probe.holds.append((time.perf_counter() - start, holder))

        return lock

    def start(self):
        self.holds = []
        self.recording = True

    def stop(self):
        self.recording = False
        return list(self.holds)


def _holder():
    """The name of the function oslo.concurrency's ``synchronized`` runs
    under the lock (its ``inner`` keeps it in ``f_name``), or "-"."""
    frame = sys._getframe(2)
    for _ in range(6):
        if frame is None:
            break
        name = frame.f_locals.get("f_name")
        if isinstance(name, str):
            return name.rsplit(".", 1)[-1]
        frame = frame.f_back
    return "-"


class Figures:
    """What one tracker measured at one N."""

    def __init__(self, tracker, n):
        self.tracker, self.n = tracker, n
        self.setup_s = 0.0
        self.first = None  # (cpu, wall) of the periodic after the node was filled
        # (cpu until synced, wall, lock hold total, holds, (longest, holder), call's cpu)
        self.periodics = []
        # (wall, cpu, lock hold total, cpu until synced, agent calls)
        self.claims = []
        self.held = None

    def periodic_cpu(self):
        return statistics.median(p[0] for p in self.periodics)

    def periodic_lock(self):
        return statistics.median(p[2] for p in self.periodics)

    def claim_wall(self):
        return statistics.median(c[0] for c in self.claims)

    def claim_cpu(self):
        return statistics.median(c[1] for c in self.claims)

    def lines(self):
        p = self.periodics
        c = self.claims
        head = f"tracker={self.tracker} n={self.n}"
        longest = max((x[4] for x in p), key=lambda hold: hold[0])
        yield (
            f"{head} setup_s={self.setup_s:.1f} held={self.held} "
            f"first_periodic_cpu_ms={ms(self.first[0]):.1f} "
            f"first_periodic_wall_ms={ms(self.first[1]):.1f}"
        )
        yield (
            f"{head} periodics={len(p)} periodic_cpu_ms={ms(self.periodic_cpu()):.2f} "
            f"periodic_cpu_ms_runs={','.join(f'{ms(x[0]):.1f}' for x in p)} "
            f"periodic_call_cpu_ms={ms(statistics.median(x[5] for x in p)):.2f} "
            f"periodic_wall_ms={ms(statistics.median(x[1] for x in p)):.2f} "
            f"periodic_lock_hold_ms={ms(self.periodic_lock()):.3f} "
            f"periodic_lock_holds={max(x[3] for x in p)} "
            f"periodic_lock_hold_ms_runs={','.join(f'{ms(x[2]):.1f}' for x in p)} "
            f"longest_hold_ms={ms(longest[0]):.1f} longest_holder={longest[1]}"
        )
        yield (
            f"{head} claims={len(c)} claim_p50_ms={ms(self.claim_wall()):.2f} "
            f"claim_max_ms={ms(max(x[0] for x in c)):.2f} "
            f"claim_cpu_p50_ms={ms(self.claim_cpu()):.2f} "
            f"claim_cpu_ms_runs={','.join(f'{ms(x[1]):.1f}' for x in c)} "
            f"claim_lock_hold_p50_ms={ms(statistics.median(x[2] for x in c)):.3f} "
            f"claim_then_synced_cpu_p50_ms={ms(statistics.median(x[3] for x in c)):.2f} "
            f"claim_agent_calls_max={max(x[4] for x in c)}"
        )


def _rabbit_link_class(url):
    """The fixture's served link (rtagent.nova.rpcserved.ServedLink) over
    ``url`` instead of ``fake://``: the agent's RPC server on one
    transport, the tracker's client on another, as two processes would."""
    from oslo_config import cfg

    from rtagent.nova.link import RpcLink
    from rtagent.nova.rpcserved import ServedLink
    from rtagent.rpc import transport
    from rtagent.rpc.client import AgentClient
    from rtagent.rpc.endpoint import AgentEndpoint
    from rtagent.rpc.server import RPCServer

    class RabbitServedLink(ServedLink):
        def __init__(self, local, host):
            # Not ServedLink.__init__: it would make a fake:// transport.
            conf = cfg.ConfigOpts()
            transport.register_opts(conf)
            conf([], project="rtagent", default_config_files=[])
            self._server_transport = transport.get_transport(conf, url=url)
            self._transport = transport.get_transport(conf, url=url)
            on_change = local.prompt.request if local.prompt is not None else None
            endpoint = AgentEndpoint(local.agent, host, local.agent_host_ip, on_change=on_change)
            self._server = RPCServer(self._server_transport, host, endpoint)
            self._server.start()
            RpcLink.__init__(self, AgentClient(self._transport, host, timeout=60))
            self._local = local
            self.agent = local.agent
            self.prompt = local.prompt

        def close(self):
            try:
                self._server.stop()
                self._server_transport.cleanup()
                self._transport.cleanup()
            finally:
                self._local.close()

    return RabbitServedLink


def _without_views(call):
    """A link's ``call`` whose claims' replies lack the node's view, as an
    agent older than RPC 1.9 answers them: the tracker then asks for the
    view with a second call (``--two-trips``, the negative control of
    ``agent_calls_per_claim``, and the claim's cost before 1.9)."""

    def call_without_views(method, **args):
        reply = call(method, **args)
        if method in {"instance_claim", "start_move"} and isinstance(reply, dict):
            reply = {k: v for k, v in reply.items() if k != "compute_node"}
        return reply

    return call_without_views


def _reclaim_everything(counts):
    """The negative control: rtagent's reconcile, then a claim of every
    instance on the node not moving and not deleted, held or not (the
    periodic before it went by difference)."""
    from nova import objects
    from nova.compute import vm_states

    from rtagent.nova import reconcile
    from rtagent.nova.link import AgentRefused

    real = reconcile.reconcile

    def reclaim_everything(link, context, records, *args, **kwargs):
        real(link, context, records, *args, **kwargs)
        counts["periodics"] += 1
        adopt = kwargs["adopt"]  # (context, instance, cn, flavor, topology)
        cn = records.cn
        instances = objects.InstanceList.get_by_host_and_node(
            context, records.host, cn.hypervisor_hostname, expected_attrs=["flavor"]
        )
        moving = {m.instance_uuid for m in records.moving}
        for instance in instances:
            if instance.uuid in moving or vm_states.allow_resource_removal(
                vm_state=instance.vm_state, task_state=instance.task_state
            ):
                continue
            try:
                adopt(context, instance, cn, instance.flavor, None)
                counts["reclaims"] += 1
            except AgentRefused:
                counts["refused"] += 1

    return reclaim_everything


def _case_class():
    """nova's ProviderUsageBaseTestCase with the benchmark as its one test
    (nova's modules are importable only in the child)."""
    import logging

    import fixtures
    from nova import context as nova_context
    from nova import objects
    from nova.compute import power_state, vm_states
    from nova.tests.functional import integrated_helpers
    from oslo_concurrency import lockutils
    from oslo_utils import uuidutils

    from rtagent.nova.testing import RtagentTrackerFixture, placement_started

    class Node:
        """One compute service and its node, holding N instances."""

        def __init__(self, n, compute, figures):
            self.n = n
            self.host = compute.manager.host
            self.compute = compute
            self.rt = compute.manager.rt
            self.nodename = compute.manager.driver.get_available_nodes()[0]
            self.figures = figures
            self.on_node = 0
            self.cn = None
            self.link = None
            self.prompt = None

    class Bench(integrated_helpers.ProviderUsageBaseTestCase):
        compute_driver = "fake.FakeDriver"
        # Set by the runner before each run (nova's clean-up clears the
        # instance's public attributes, not the class's).
        kind = None
        options = None
        out = None  # {"figures": [...], "extra": {...}}

        def setUp(self):
            super().setUp()
            # Production's level: nova's harness otherwise formats every
            # debug line, which nova's tracker writes per instance.
            logging.getLogger().setLevel(logging.INFO)
            self.probe = LockProbe(LOCK_NAME)
            self.useFixture(
                fixtures.MonkeyPatch(
                    "oslo_concurrency.lockutils.lock", self.probe.wrap(lockutils.lock)
                )
            )
            self.fixture = None
            self.reclaims = {"periodics": 0, "reclaims": 0, "refused": 0}
            if self.kind != "nova":
                if self.kind == "rpc":
                    link_class = _rabbit_link_class(self.options.rabbit_url)
                    self.useFixture(
                        fixtures.MonkeyPatch("rtagent.nova.testing._served", link_class)
                    )
                if self.options.reclaim_everything:
                    self.useFixture(
                        fixtures.MonkeyPatch(
                            "rtagent.nova.reconcile.reconcile", _reclaim_everything(self.reclaims)
                        )
                    )
                mode = "rpc" if self.kind == "rpc" else "inprocess"
                self.fixture = self.useFixture(RtagentTrackerFixture(mode))
                placement_started(self.placement.fixture.endpoint)
            self.ctxt = nova_context.get_admin_context()
            self.flavor = objects.Flavor.get_by_name(self.ctxt, FLAVOR_NAME)
            self.resources = {
                "VCPU": self.flavor.vcpus,
                "MEMORY_MB": self.flavor.memory_mb,
                "DISK_GB": self.flavor.root_gb,
            }
            self.errors = []
            self.nodes = []

        def test_measure(self):
            """One compute service per N, each filled and through its first
            periodic in turn; then the timed periodics and claims, round by
            round over the nodes (the first node of a round turning), so
            that a slower stretch of the machine falls on every N alike."""
            opts = self.options
            for n in opts.sizes:
                if self.kind == "nova" and n >= SCALE_N and self._skip_nova_large(n):
                    continue
                self.nodes.append(self._start_node(n))
            nodes = self.nodes
            for r in range(opts.periodic_runs):
                for node in nodes[r % len(nodes) :] + nodes[: r % len(nodes)]:
                    if r < self._runs(node):
                        node.figures.periodics.append(self._periodic(node))
            for k in range(opts.claims):
                for node in nodes[k % len(nodes) :] + nodes[: k % len(nodes)]:
                    if k < self._claims(node):
                        node.figures.claims.append(self._claim_one(node))
            for node in nodes:
                self._check_held(node, node.n + self._claims(node))
                if self.kind == "nova" and not all(p[2] > 0 for p in node.figures.periodics):
                    raise Void(f"lock_probe_saw_no_hold_n{node.n}")
                for line in node.figures.lines():
                    emit(line)
            if opts.reclaim_everything and self.kind != "nova":
                emit(f"tracker={self.kind} control_reclaims={self.reclaims['reclaims']}")
                if not self.reclaims["reclaims"]:
                    raise Void("control_reclaimed_nothing")

        def _runs(self, node):
            if node.n >= SCALE_N:
                return min(self.options.periodic_runs, PERIODIC_RUNS_LARGE)
            return self.options.periodic_runs

        def _claims(self, node):
            if self.kind == "nova" and node.n >= SCALE_N:
                return min(self.options.claims, NOVA_CLAIMS_LARGE)
            return self.options.claims

        def _start_node(self, n):
            """A compute service on host ``host-<n>``, its node filled with
            ``n`` instances, then its first periodic (rtagent adopts them)."""
            figures = Figures(self.kind, n)
            self.out["figures"].append(figures)
            node = Node(n, self._start_compute(f"host-{n}"), figures)
            ctxt = nova_context.get_admin_context()
            nova_context.set_target_cell(ctxt, self.host_mappings[node.host].cell_mapping)
            node.ctxt = ctxt
            node.cn = objects.ComputeNode.get_by_host_and_nodename(ctxt, node.host, node.nodename)
            if self._get_provider_uuid_by_host(node.nodename) != node.cn.uuid:
                raise Void("provider_not_the_compute_node")
            real = node.rt.update_available_resource

            def recorded(*args, **kwargs):
                try:
                    return real(*args, **kwargs)
                except Exception as exc:
                    self.errors.append(f"{type(exc).__name__}:{exc}")
                    raise

            node.rt.update_available_resource = recorded
            if self.fixture is not None:
                node.link = self.fixture.link(node.host)
                link_class = type(node.link).__name__
                expected = "RabbitServedLink" if self.kind == "rpc" else "LocalLink"
                if link_class != expected:
                    raise Void(f"link_{link_class}_not_{expected}")
                node.prompt = node.link.prompt
                if self.options.two_trips:
                    node.link.call = _without_views(node.link.call)
            started = time.perf_counter()
            self._fill(node)
            figures.setup_s = time.perf_counter() - started
            figures.first = self._periodic(node)[:2]
            figures.held = self._check_held(node, n)
            return node

        def _skip_nova_large(self, n):
            """True (and said) if nova's part at ``n`` would take longer
            than the budget, projected linearly from the size before: its
            instances, its first periodic and the timed ones, and its
            claims (a nova claim costs about one periodic: both read every
            consumer's allocations on the node from Placement)."""
            last = self.nodes[-1] if self.nodes else None
            if last is None or last.n == 0:
                return False
            first_wall = last.figures.first[1]
            calls = 1 + min(self.options.periodic_runs, PERIODIC_RUNS_LARGE)
            calls += min(self.options.claims, NOVA_CLAIMS_LARGE)
            projected = n / last.n * (last.figures.setup_s + calls * first_wall)
            budget = self.options.nova_large_budget_s
            if self.options.quick or projected > budget:
                reason = "quick" if self.options.quick else "over_budget"
                emit(
                    f"tracker=nova n={n} skipped={reason} projected_s={projected:.0f} "
                    f"budget_s={budget:g}; nova stops at n={last.n}"
                )
                self.out["extra"]["nova_stopped_at"] = last.n
                return True
            return False

        # -- the nodes' instances -----------------------------------------

        def _new_instance(self, node, active):
            flavor = self.flavor
            instance = objects.Instance(
                context=node.ctxt,
                uuid=uuidutils.generate_uuid(),
                project_id=PROJECT_ID,
                user_id=USER_ID,
                display_name="bench",
                hostname="bench",
                image_ref=IMAGE_REF,
                flavor=flavor,
                instance_type_id=flavor.id,
                vcpus=flavor.vcpus,
                memory_mb=flavor.memory_mb,
                root_gb=flavor.root_gb,
                ephemeral_gb=flavor.ephemeral_gb,
                vm_state=vm_states.ACTIVE if active else vm_states.BUILDING,
                task_state=None,
                power_state=power_state.RUNNING if active else power_state.NOSTATE,
                availability_zone="nova",
                system_metadata={},
                numa_topology=None,
                pci_requests=objects.InstancePCIRequests(requests=[]),
                host=node.host if active else None,
                node=node.nodename if active else None,
                compute_id=node.cn.id if active else None,
                launched_on=node.host if active else None,
            )
            instance.create()
            return instance

        def _allocate(self, node, uuids):
            """Each instance's allocation on the node, as the scheduler
            writes it before the compute claims."""
            for i in range(0, len(uuids), ALLOCATION_BATCH):
                body = {
                    uuid: {
                        "allocations": {node.cn.uuid: {"resources": self.resources}},
                        "project_id": PROJECT_ID,
                        "user_id": USER_ID,
                        "consumer_generation": None,
                    }
                    for uuid in uuids[i : i + ALLOCATION_BATCH]
                }
                reply = self.placement.post("/allocations", body, version="1.28")
                if reply.status != 204:
                    raise Void(f"allocations_refused_{reply.status}")

        def _fill(self, node):
            made = [self._new_instance(node, active=True).uuid for _ in range(node.n)]
            self._allocate(node, made)
            node.on_node = node.n

        def _check_held(self, node, n):
            """The instances the tracker accounts for on the node, VOID
            unless ``n``."""
            if self.kind == "nova":
                held = len(node.rt.tracked_instances)
            else:
                status = node.link.call("get_status", node_uuid=node.cn.uuid)
                held = len(status.get("instance_uuids") or ())
            if held != n:
                raise Void(f"{self.kind}_holds_{held}_of_{n}_on_host-{node.n}")
            return held

        # -- the timed calls ----------------------------------------------

        def _settle(self):
            """Wait until every agent's prompt sync has nothing pending, so
            that its Placement sync (a thread of its own) runs in no timed
            window."""
            deadline = time.monotonic() + SETTLE_S
            for node in self.nodes:
                while node.prompt is not None and not node.prompt.idle():
                    if time.monotonic() > deadline:
                        raise Void("prompt_sync_never_idle")
                    time.sleep(0.005)

        def _periodic(self, node):
            """One ComputeManager periodic: (process CPU s, wall s, lock
            hold total s, holds, (longest hold s, its holder), CPU s of the
            call alone).

            The CPU counts the Placement sync the periodic asks the agent's
            prompt sync for (every periodic does: its ``set_disabled`` is a
            mutation to the endpoint), run in a thread of its own 0.1 s
            later: inside the call when the call is longer, after it
            otherwise. nova's periodic syncs Placement in the call."""
            self._settle()
            errors = len(self.errors)
            logged = self.stdlog.logger.output.count("Error updating resources")
            self.probe.start()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            node.compute.manager.update_available_resource(node.ctxt)
            wall, call_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            holds = self.probe.stop()
            self._settle()
            cpu = time.process_time() - cpu0
            longest = max(holds, key=lambda hold: hold[0], default=(0.0, "-"))
            if len(self.errors) > errors:
                raise Void(f"periodic_raised:{self.errors[-1]}")
            if self.stdlog.logger.output.count("Error updating resources") > logged:
                raise Void("periodic_logged_an_error")
            return cpu, wall, sum(h[0] for h in holds), len(holds), longest, call_cpu

        def _claim_one(self, node):
            """One new instance claimed as ComputeManager claims it (its
            allocation written first, as the scheduler does): (wall s,
            CPU s, lock hold s, CPU s until the agent's prompt sync ran)."""
            instance = self._new_instance(node, active=False)
            self._allocate(node, [instance.uuid])
            allocations = {node.cn.uuid: {"resources": dict(self.resources)}}
            self._settle()
            calls = self.fixture.counts["agent_calls"] if self.fixture is not None else 0
            self.probe.start()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            node.rt.instance_claim(node.ctxt, instance, node.nodename, allocations, limits=None)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            holds = self.probe.stop()
            if self.fixture is not None:
                calls = self.fixture.counts["agent_calls"] - calls
            self._settle()
            synced = time.process_time() - cpu0
            # Built: it stays on the node as one of its instances.
            instance.vm_state = vm_states.ACTIVE
            instance.power_state = power_state.RUNNING
            instance.save()
            node.on_node += 1
            return wall, cpu, sum(h[0] for h in holds), synced, calls

    return Bench


def child_main(args):
    import logging
    import unittest
    import warnings

    # nova's functional test package monkey-patches with eventlet on import,
    # as under nova's test runner: first, before anything imports urllib3.
    # Its two deprecation notices about eventlet say nothing about the run.
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    logging.getLogger("nova.monkey_patch").setLevel(logging.ERROR)
    import nova.tests.functional  # noqa: F401
    from nova import version as nova_version

    emit(
        f"nova={nova_version.version_string()} python={sys.executable} "
        f"tmpdir={os.environ.get('TMPDIR', '/tmp')} log_level=INFO"
    )
    emit(
        f"sizes={','.join(str(n) for n in args.sizes)} periodic_runs={args.periodic_runs} "
        f"claims={args.claims} flavor={FLAVOR_NAME} driver=fake.FakeDriver "
        f"reclaim_everything={'yes' if args.reclaim_everything else 'no'} "
        f"two_trips={'yes' if args.two_trips else 'no'}"
    )
    # Its INFO lines come at each case's clean-up, after nova's log capture.
    logging.getLogger("nova.thread_pool_factory").setLevel(logging.WARNING)
    bench = _case_class()
    out = {"figures": [], "extra": {}}
    void = []
    for kind in TRACKERS:
        bench.kind, bench.options, bench.out = kind, args, out
        started = time.perf_counter()
        case = bench("test_measure")
        result = unittest.TestResult()
        case.run(result)
        emit(f"tracker={kind} case_s={time.perf_counter() - started:.1f}")
        for _test, trace in result.errors + result.failures:
            os.write(2, trace.encode())
            void.append(f"{kind}:{_void_reason(trace)}")
        if result.skipped:
            void.append(f"{kind}:skipped")
        if void:
            break
    return report(args, out, void)


def _void_reason(trace):
    """The exception's one line, as one token."""
    last = trace.strip().splitlines()[-1] if trace.strip() else "unknown"
    if last.startswith(f"{__name__}.Void: ") or last.startswith("Void: "):
        last = last.split(": ", 1)[1]
    return "_".join(last.split())[:120]


def report(args, out, void):
    by = {(f.tracker, f.n): f for f in out["figures"] if f.periodics and f.claims}
    figures, spreads = {}, {}

    def ratio(a, b):
        return a / b if b > 0 else float("inf")

    def compare(kind, prefix):
        nova, mine = by.get(("nova", RATIO_N)), by.get((kind, RATIO_N))
        if nova is not None and mine is not None:
            figures[f"{prefix}periodic_cpu_ratio_vs_nova"] = ratio(
                mine.periodic_cpu(), nova.periodic_cpu()
            )
            figures[f"{prefix}periodic_lock_ratio_vs_nova"] = ratio(
                mine.periodic_lock(), nova.periodic_lock()
            )
            figures[f"{prefix}claim_p50_ratio_vs_nova"] = ratio(
                mine.claim_wall(), nova.claim_wall()
            )
            figures[f"{prefix}claim_cpu_p50_ratio_vs_nova"] = ratio(
                mine.claim_cpu(), nova.claim_cpu()
            )
        if mine is not None:
            # The most any claim of the node cost: one round trip each.
            figures[f"{prefix}agent_calls_per_claim"] = float(max(c[4] for c in mine.claims))
            figures[f"{prefix}claim_p50_ms"] = ms(mine.claim_wall())
        large = by.get((kind, SCALE_N))
        if large is not None:
            figures[f"{prefix}periodic_cpu_ms_n1000"] = ms(large.periodic_cpu())
            if mine is not None:
                # The k-th claims of the two nodes ran in the same round:
                # one ratio per round, judged by its median and spread.
                fill = spread.judge(
                    f"{prefix}fill_cost_ratio_n1000_vs_n100",
                    spread.ratios([c[1] for c in large.claims], [c[1] for c in mine.claims]),
                    TARGETS["fill_cost_ratio_n1000_vs_n100"],
                )
                figures[fill.name] = fill.value
                spreads[fill.name] = fill

    compare(JUDGED, "")
    compare("inprocess", "inprocess_")
    nova_small, nova_large = by.get(("nova", RATIO_N)), by.get(("nova", SCALE_N))
    if nova_large is not None:
        figures["nova_periodic_cpu_ms_n1000"] = ms(nova_large.periodic_cpu())
        if nova_small is not None:
            figures["nova_fill_cost_ratio_n1000_vs_n100"] = ratio(
                nova_large.claim_cpu(), nova_small.claim_cpu()
            )
    for key, value in figures.items():
        emit(spreads[key].line(digits=3) if key in spreads else f"{key}={value:.3f}")
    if "nova_stopped_at" in out["extra"]:
        emit(f"nova_stopped_at_n={out['extra']['nova_stopped_at']}")
    emit(f"seconds={time.time() - args.started:.1f}")
    if not void:
        void = [f"no_{key}" for key in TARGETS if key not in figures]
    missed = [
        key
        for key, target in TARGETS.items()
        if (spreads[key].verdict == spread.MISS if key in spreads else figures.get(key, 0) > target)
    ]
    undecided = [key for key in TARGETS if key in spreads and spreads[key].verdict == spread.VOID]
    judged = " ".join(
        (spreads[key].fields(digits=3) if key in spreads else f"{key}={figures[key]:.3f}")
        + f" (target <= {target:g})"
        for key, target in TARGETS.items()
        if key in figures
    )
    # A run that failed (a tracker's case errored, a figure missing) is
    # VOID; otherwise a gate missed shows even when another could not be
    # judged (its spread straddling its target).
    if void:
        verdict = "VOID"
    elif missed:
        verdict = "MISS"
    else:
        verdict = "VOID" if undecided else "PASS"
    void = list(void) + [f"{key}_undecided" for key in undecided]
    emit(
        f"summary {judged} missed={','.join(missed) or 'none'} "
        f"void={','.join(void) or 'none'} {verdict}".replace("summary  ", "summary ")
    )
    return 0 if verdict == "PASS" else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reclaim-everything",
        action="store_true",
        help="negative control: every periodic claims every instance on the node again",
    )
    parser.add_argument(
        "--two-trips",
        action="store_true",
        help="negative control: claims' replies lack the node's view (an agent older "
        "than RPC 1.9), so each claim asks for it again",
    )
    parser.add_argument(
        "--sizes",
        type=lambda s: sorted({int(x) for x in s.split(",") if x.strip()}),
        default=list(SIZES),
        help="instance counts on the node, comma-separated (default 0,100,1000; "
        "the targets need 100 and 1000)",
    )
    parser.add_argument(
        "--periodic-runs",
        type=int,
        default=PERIODIC_RUNS,
        help=f"timed periodics per N (at most {PERIODIC_RUNS_LARGE} at N >= {SCALE_N})",
    )
    parser.add_argument("--claims", type=int, default=CLAIMS, help="claims timed per N")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer runs (3 periodics, 3 claims per N) and nova's tracker stops at N=100",
    )
    parser.add_argument(
        "--nova-large-budget-s",
        type=float,
        default=NOVA_LARGE_BUDGET_S,
        help="nova's tracker stops before N=1000 if its part there is projected longer",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=MAX_SECONDS,
        help="the whole run's bound: past it the measuring process is killed, VOID",
    )
    parser.add_argument(
        "--tmpdir",
        default="/dev/shm" if os.path.isdir("/dev/shm") else None,
        help="where the measuring process gets its TMPDIR (the agents' state directories)",
    )
    parser.add_argument(
        "--nova-python",
        default=os.environ.get("RTAGENT_NOVA_PYTHON", NOVA_PYTHON),
        help="python of nova's virtualenv (default .venv-nova/bin/python)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rabbit-url", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.periodic_runs = min(args.periodic_runs, 3)
        args.claims = min(args.claims, 3)
    if args.child:
        if args.started is None:
            args.started = time.time()
        return child_main(args)
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
