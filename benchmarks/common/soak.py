"""The crash-loop soak: the whole agent SIGKILLed round after round.

Each round runs the real agent (builder, tracker, store, Placement sync and
allocation healing, the libvirt test driver's demo host reported as two
nodes) in a child process against a real Placement process over HTTP. The
child first *settles*: it audits until every node is synced and nothing
released is left to heal, and reports the state it restored. The parent
checks that state and Placement, then lets the child drive: an audit thread
runs back to back while the main thread makes random claims (standalone:
the agent writes the allocation), aborts and moves (start, finish, confirm,
revert; same node, in, out and between the two nodes), saying each call
before and after it (:mod:`tests.functional.crashmodel`). After a random
number of lines the parent SIGKILLs the child, and the next round's child
restarts from the state directory.

Each check compares:

(a) the restored state of each node with the model of acknowledged calls
    (the call in flight may or may not have landed), and its usage with a
    recount from that model;
(b) Placement with a recount: exactly the two node providers exist, their
    inventories are those of the first clean sync (claims do not change
    inventory), and the allocations on each provider are, per consumer,
    those the model says the agent wrote and has not proved dead: every
    standalone claim acknowledged and still active on the node holds its
    flavor; every consumer that left the node (aborted, moved away and
    confirmed, reverted away) holds nothing there once healed; nothing else
    holds anything. A consumer that left and came back (a revert) may or may
    not have been healed in between; the check learns which.

Workers are forked from a forkserver that has imported the agent once.
"""

import copy
import dataclasses
import json
import logging
import multiprocessing
import os
import random
import threading
import time
import traceback

from oslo_concurrency import lockutils

from rtagent import conf as rtconf
from rtagent.placement.backoff import SyncBackoff
from rtagent.placement.errors import AllocationRefused, PlacementError
from rtagent.placement.passes import heal
from rtagent.service import builder
from rtagent.testing.placement_server import admin_adapter
from rtagent.tracker.errors import ComputeResourcesUnavailable
from rtagent.tracker.model import Flavor
from tests.functional.conftest import DEMO_URI
from tests.functional.crashmodel import Model, call, crosses, drain, drive, pick_step, replay

_FORK = multiprocessing.get_context("forkserver")
_FORK.set_forkserver_preload([__name__])
# See test_crash.py: the first lock imports eventlet; pay for it once.
lockutils.ReaderWriterLock()

SETTLE_AUDITS = 10  # a restarted agent settles within 3 audits when healthy
LINE_TIMEOUT_S = 60


# -- the child: the agent, restarted from its state directory ------------------


class TwoNodes:
    """The configured libvirt driver, its one host reported as two nodes
    (the second named ``<hostname>-2``), as a driver of several nodes does."""

    def __init__(self, driver):
        self._driver = driver

    def __getattr__(self, name):
        return getattr(self._driver, name)

    def read_nodes(self):
        view = self._driver.read_nodes()[0]
        second = dataclasses.replace(view, hypervisor_hostname=view.hypervisor_hostname + "-2")
        return [view, second]

    def read_host(self):
        return self.read_nodes()[0]


def make_conf(workdir):
    conf = rtconf.new_conf()
    conf([], project="rtagent", default_config_files=[])
    conf.set_override("state_path", os.path.join(workdir, "state"))
    conf.set_override("connection_uri", DEMO_URI, group="libvirt")
    instances = os.path.join(workdir, "instances")
    os.makedirs(instances, exist_ok=True)
    conf.set_override("instances_path", instances, group="libvirt")
    # Room for a dozen guests per node (the demo host has 3 online CPUs,
    # and its running domains are reserved): claims and moves fit and
    # are refused in turn.
    conf.set_override("cpu_allocation_ratio", 16.0)
    # Every audit reads Placement, so that a restarted agent settles fast.
    conf.set_override("placement_refresh_interval", 0, group="rtagent")
    return conf


def build(workdir, endpoint):
    conf = make_conf(workdir)
    return builder.build_agent(
        conf,
        driver=TwoNodes(builder.libvirt_driver(conf)),
        adapter=admin_adapter(endpoint),
        make_backoff=lambda: SyncBackoff(window=0),
    )


def child(conn, workdir, endpoint, control=None):
    """Restart the agent, settle, report; then drive until killed.
    ``control`` ``"skip-healing"``: no allocation healing (a negative control)."""
    if control == "skip-healing":
        heal.HealPass.run = lambda self, node: node
    logging.basicConfig(
        filename=os.path.join(workdir, "agent.log"),
        level=logging.WARNING,
        format=f"%(asctime)s {os.getpid()} %(levelname)s %(name)s %(message)s",
    )
    try:
        _child(conn, workdir, endpoint)
    except BaseException:
        conn.send_bytes(("E " + traceback.format_exc()).encode())
        raise


def _child(conn, workdir, endpoint):
    agent = build(workdir, endpoint)
    audits, settled = settle(agent)
    uuids = [agent.nodes.primary_uuid]
    uuids += sorted(t.node_uuid for t in agent.nodes.trackers() if t.node_uuid != uuids[0])
    trackers = [agent.nodes.get(u) for u in uuids]
    report = dict(
        nodes=uuids,
        audits=audits,
        settled=settled,
        state=[node_state(t.snapshot()) for t in trackers],
    )
    conn.send_bytes(("C " + json.dumps(report)).encode())
    order = json.loads(conn.recv_bytes().decode())
    if order.get("stop"):
        agent.close()
        return
    rng = random.Random(order["seed"])
    threading.Thread(target=_audit_loop, args=(agent, rng.random()), daemon=True).start()

    def do(index, op):
        if op[0] != "claim":
            call(trackers[index], op)
            return
        agent.claim_standalone(
            op[1], Flavor(*op[2]), project_id="soak", user_id="soak", node_uuid=uuids[index]
        )

    drive(
        conn,
        do,
        lambda: pick_step(rng, trackers, uuids),
        order["resume"],
        (ComputeResourcesUnavailable, AllocationRefused),
    )


def settle(agent):
    """Audit until every node synced and has nothing left to heal (healing
    removes a consumer on its second look). :returns: (audits, settled)."""
    for audit in range(1, SETTLE_AUDITS + 1):
        try:
            agent.audit()
        except PlacementError:
            continue
        if len(agent.nodes.trackers()) == 2 and not any(
            t.snapshot().healable for t in agent.nodes.trackers()
        ):
            return audit, True
    return SETTLE_AUDITS, False


def _audit_loop(agent, seed):
    rng = random.Random(seed)
    while True:
        try:
            agent.audit()
        except Exception:
            logging.getLogger(__name__).exception("audit failed")
        time.sleep(rng.uniform(0, 0.02))


def node_state(snap):
    """A node's restored state as the model's ``view()`` and ``usage()``
    put it (JSON-shaped)."""
    instances = {
        i.uuid: [i.flavor.vcpus, i.flavor.memory_mb, i.flavor.root_gb] for i in snap.instances
    }
    moves = {m.uuid: [m.instance_uuid, m.status == "finished"] for m in snap.migrations}
    usage = [
        snap.usage.get("VCPU", 0) + snap.usage.get("PCPU", 0),
        snap.usage.get("MEMORY_MB", 0),
        snap.usage.get("DISK_GB", 0),
    ]
    return dict(view=[instances, moves, {}, {}], usage=usage)


# -- the parent's model -----------------------------------------------------


class PlacedModel(Model):
    """A node's model, and the allocations its standalone claims wrote:
    consumer -> [resources, certain, written]. ``certain`` (that Placement
    holds them) is False once the consumer left the node at some point
    (healing may have removed them since), or while the claim that wrote
    them was cut short; ``written`` is True once they were seen written (an
    acknowledged claim, or a check that found them)."""

    def __init__(self, node):
        super().__init__(node)
        self.allocations = {}

    def apply(self, op):
        super().apply(op)
        if op[0] == "claim":
            self.allocations[op[1]] = [resources(op[2]), True, True]
        active = self.active()
        for consumer, entry in self.allocations.items():
            if consumer not in active:
                entry[1] = False

    def active(self):
        """The consumers the node relies on (the tracker's own rule)."""
        moving = {m["inst"] for m in self.moves.values()}
        return set(self.instances) | set(self.moves) | moving


def resources(flavor):
    """What a standalone claim of ``[vcpus, memory_mb, disk_gb]`` writes."""
    amounts = dict(zip(("VCPU", "MEMORY_MB", "DISK_GB"), flavor, strict=True))
    return {rc: amount for rc, amount in amounts.items() if amount}


def check_placement(adapter, models, baseline):
    """Compare Placement with the models; learn what uncertain consumers
    hold. :returns: (mismatches as strings, how many written allocations
    of consumers that left a node were found healed)."""
    found, healed = [], 0
    providers = adapter.get("/resource_providers").json()["resource_providers"]
    uuids = sorted(p["uuid"] for p in providers)
    if uuids != sorted(m.node for m in models):
        found.append(f"providers {uuids}")
    for model in models:
        inventories = _inventories(adapter, model.node)
        if inventories != baseline[model.node]:
            found.append(f"node {model.node} inventories {inventories}")
        body = adapter.get(f"/resource_providers/{model.node}/allocations").json()
        held = {c: a["resources"] for c, a in body["allocations"].items()}
        active = model.active()
        for consumer in sorted(set(held) | set(model.allocations)):
            expected, certain, written = model.allocations.get(consumer, (None, True, False))
            if consumer not in active:
                expected, certain = None, True  # left the node: healed by now
                healed += written and consumer not in held
            if held.get(consumer) == expected or (not certain and consumer not in held):
                if consumer in held:
                    model.allocations[consumer] = [expected, True, True]
                else:
                    model.allocations.pop(consumer, None)
                continue
            found.append(
                f"node {model.node} consumer {consumer}: holds {held.get(consumer)}, "
                f"expected {expected}{'' if certain else ' or nothing'}"
            )
            model.allocations.pop(consumer, None)
    return found, healed


def _inventories(adapter, node):
    body = adapter.get(f"/resource_providers/{node}/inventories").json()
    return body["inventories"]


# -- the loop ---------------------------------------------------------------


@dataclasses.dataclass
class Figures:
    """What a run counted (benchmarks/soak.py prints them; benchmarks/README.md
    says what each means)."""

    rounds: int = 0
    checks: int = 0
    acknowledged: int = 0
    lost_acknowledged: int = 0
    placement_mismatches: int = 0
    unsettled: int = 0
    kills_mid_call: int = 0
    in_flight_landed: int = 0
    crossed: int = 0
    claims: int = 0
    healed: int = 0
    refused: int = 0
    failures: list = dataclasses.field(default_factory=list)


class Soak:
    """Rounds of (restart, settle, check, drive, SIGKILL) over one state
    directory and one Placement.

    :param workdir: a private directory (state, instances, the agent's log).
    :param endpoint: Placement's URL (noauth2).
    :param seed: of every random choice (the children's too).
    :param max_lines: a round reads 1 to this many of the child's lines
        before the kill.
    :param control: passed to :func:`child`.
    """

    def __init__(self, workdir, endpoint, seed, max_lines=80, control=None):
        self.control = control
        os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.endpoint = endpoint
        self.rng = random.Random(seed)
        self.seed = seed
        self.max_lines = max_lines
        self.adapter = admin_adapter(endpoint)
        self.figures = Figures()
        self.models = None
        self.baseline = None
        self.in_flight = None
        self.resume = None

    def run(self, rounds, deadline=None, progress=None):
        """Kill ``rounds`` times (fewer when the state no longer matches the
        model, or at the monotonic ``deadline``), then check once more.
        ``progress`` (callable(figures)) is called after each round."""
        for _ in range(rounds):
            if self.figures.lost_acknowledged or (
                deadline is not None and time.monotonic() > deadline
            ):
                break
            self.round(kill=True)
            if progress is not None:
                progress(self.figures)
        if not self.figures.lost_acknowledged:
            self.round(kill=False)  # the check after the last kill
        return self.figures

    def round(self, kill):
        reader, writer = _FORK.Pipe()
        args = (writer, self.workdir, self.endpoint, self.control)
        proc = _FORK.Process(target=child, args=args, daemon=True)
        proc.start()
        writer.close()
        lines = []
        try:
            self.check(_parse_report(_receive(reader, proc)))
            if not kill or self.figures.lost_acknowledged:
                reader.send_bytes(json.dumps({"stop": True}).encode())
                proc.join(30)
                return
            order = {"seed": self.rng.randrange(2**31), "resume": self.resume}
            reader.send_bytes(json.dumps(order).encode())
            wanted = self.rng.randint(1, self.max_lines)
            while len(lines) < wanted:
                lines.append(_receive(reader, proc))
            # Sometimes a little later, inside a call or an audit's I/O.
            if self.rng.random() < 0.5:
                time.sleep(self.rng.uniform(0, 0.01))
        finally:
            proc.kill()
            proc.join(10)
        lines += drain(reader)
        errors = [line for line in lines if line.startswith("E ")]
        if errors:
            raise SoakError(errors[0])
        self._account(lines)

    def _account(self, lines):
        f = self.figures
        f.rounds += 1
        f.acknowledged += lines.count("A")
        f.refused += lines.count("R")
        nodes = [m.node for m in self.models]
        f.crossed += sum(1 for line in lines if line.startswith("S ") and crosses(line, nodes))
        f.claims += sum(1 for line in lines if line.startswith("B ") and '"claim"' in line)
        self.in_flight, self.resume = replay(self.models, lines)
        if self.in_flight is not None:
            f.kills_mid_call += 1

    def check(self, report):
        f = self.figures
        f.checks += 1
        if self.models is None:  # the first start: nothing claimed yet
            self.models = [PlacedModel(node) for node in report["nodes"]]
            self.usage0 = [s["usage"] for s in report["state"]]
            self.baseline = {m.node: _inventories(self.adapter, m.node) for m in self.models}
        if not report["settled"]:
            f.unsettled += 1
            self._fail(f"not settled after {report['audits']} audits")
        state = [s["view"] for s in report["state"]]
        candidates = [self.models]
        if self.in_flight is not None:
            landed = copy.deepcopy(self.models)
            node, op = self.in_flight
            landed[node].apply(op)
            if op[0] == "claim":  # its allocation may not have been written
                landed[node].allocations[op[1]][1:] = [False, False]
            candidates.append(landed)
        matches = [c for c in candidates if [_json(m.view()) for m in c] == state]
        if not matches:
            f.lost_acknowledged += 1
            self._fail(f"restored state is not the model (in flight: {self.in_flight})")
            return  # the model is worth nothing now: the soak stops here
        f.in_flight_landed += matches[-1] is not self.models
        self.models = matches[-1]
        for model, node, base in zip(self.models, report["state"], self.usage0, strict=True):
            usage = [u - b for u, b in zip(node["usage"], base, strict=True)]
            if usage != list(model.usage()):
                f.lost_acknowledged += 1
                self._fail(f"node {model.node} usage {usage}, recount {model.usage()}")
        mismatches, healed = check_placement(self.adapter, self.models, self.baseline)
        f.placement_mismatches += len(mismatches)
        f.healed += healed
        for text in mismatches:
            self._fail(text)

    def _fail(self, text):
        self.figures.failures.append(f"check {self.figures.checks}: {text}")


class SoakError(RuntimeError):
    """The child failed in a way that is not a kill."""


def _json(value):
    return json.loads(json.dumps(value))


def _parse_report(line):
    if not line.startswith("C "):
        raise SoakError(f"expected the child's report, got {line[:200]}")
    return json.loads(line[2:])


def _receive(reader, proc):
    deadline = time.monotonic() + LINE_TIMEOUT_S
    while not reader.poll(0.5):
        if time.monotonic() > deadline:
            raise SoakError("the child went silent")
    try:
        line = reader.recv_bytes().decode()
    except EOFError:
        proc.join(10)
        raise SoakError(f"the child died (exit {proc.exitcode})") from None
    if line.startswith("E "):
        raise SoakError(line)
    return line
