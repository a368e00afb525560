"""Invariant 4: nothing acknowledged is lost, nothing is counted twice.

A real subprocess drives a tracker through random claims, aborts and moves
(start, finish, confirm, revert; as source, destination and same node) and
is killed with SIGKILL at a random point, 50 times. Before each operation
it prints what it is about to do, and after the operation returns it prints
an acknowledgement. After each kill the test reopens the state directory and
checks it against its own model of the acknowledged operations (the one in
flight may or may not have landed, but nothing else may differ), then
recounts the usage from scratch from that model.
"""

import copy
import json
import os
import random
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.unit.helpers import HOST, make_tracker

pytestmark = pytest.mark.functional

ROUNDS = 50
SELF_CONFIRMING = {"live-migration", "evacuation"}

WORKER = textwrap.dedent(
    """
    import json, random, sys, uuid
    from rtagent.tracker.errors import ComputeResourcesUnavailable
    from rtagent.tracker.model import Flavor
    from tests.unit.helpers import HOST, make_tracker

    rng = random.Random(int(sys.argv[2]))
    tracker, _ = make_tracker(sys.argv[1])
    tracker.update_host(HOST)
    node = tracker.node_uuid
    other = "99999999-9999-9999-9999-999999999999"

    def flavor():
        return [1, rng.randint(1, 8), rng.randint(0, 2)]

    def pick_op():
        snap = tracker.snapshot()
        moving = {m.instance_uuid for m in snap.migrations}
        idle = [i.uuid for i in snap.instances if i.uuid not in moving]
        migs = [m.uuid for m in snap.migrations]
        kind = rng.choice(["claim", "claim", "abort", "same", "in", "out",
                           "finish", "finish", "confirm", "revert"])
        if kind == "claim" or (kind in ("abort", "same", "out") and not idle):
            return ["claim", str(uuid.uuid4()), flavor()]
        if kind == "abort":
            return ["abort", rng.choice(idle)]
        if kind in ("finish", "confirm", "revert") and migs:
            return [kind, rng.choice(migs)]
        if kind == "same":
            u = rng.choice(idle)
            old = snap.instances[[i.uuid for i in snap.instances].index(u)].flavor
            return ["start", str(uuid.uuid4()), "resize", u, node, node,
                    [old.vcpus, old.memory_mb, old.root_gb], flavor()]
        if kind == "out":
            u = rng.choice(idle)
            old = snap.instances[[i.uuid for i in snap.instances].index(u)].flavor
            mtype = rng.choice(["resize", "migration", "live-migration"])
            new = flavor() if mtype == "resize" else [old.vcpus, old.memory_mb, old.root_gb]
            return ["start", str(uuid.uuid4()), mtype, u, node, other,
                    [old.vcpus, old.memory_mb, old.root_gb], new]
        mtype = rng.choice(["resize", "migration", "live-migration", "evacuation"])
        old = flavor()
        new = flavor() if mtype == "resize" else old
        return ["start", str(uuid.uuid4()), mtype, str(uuid.uuid4()), other, node, old, new]

    while True:
        op = pick_op()
        print("B " + json.dumps(op), flush=True)
        try:
            if op[0] == "claim":
                tracker.instance_claim(op[1], Flavor(*op[2]))
            elif op[0] == "abort":
                tracker.abort_instance_claim(op[1])
            elif op[0] == "start":
                tracker.start_move(op[1], op[3], op[2], source_node=op[4], dest_node=op[5],
                                   old_flavor=Flavor(*op[6]), new_flavor=Flavor(*op[7]))
            else:
                getattr(tracker, op[0] + "_move")(op[1])
        except ComputeResourcesUnavailable:
            print("R", flush=True)
            continue
        print("A", flush=True)
    """
)


class Model:
    """The test's own record of acknowledged operations, by its own rules."""

    def __init__(self):
        self.instances = {}  # uuid -> (vcpus, memory_mb, disk_gb)
        self.moves = {}  # uuid -> dict(role, kind, inst, old, new, finished)
        self.node = None

    def apply(self, op):
        kind = op[0]
        if kind == "claim":
            self.instances[op[1]] = tuple(op[2])
        elif kind == "abort":
            self.instances.pop(op[1], None)
            self.moves = {k: m for k, m in self.moves.items() if m["inst"] != op[1]}
        elif kind == "start":
            _, mig, mtype, inst, source, dest, old, new = op
            role = "same" if source == dest else ("source" if source == self.node else "dest")
            self.moves[mig] = dict(
                role=role, kind=mtype, inst=inst, old=tuple(old), new=tuple(new), finished=False
            )
        else:
            self._step(kind, op[1])

    def _step(self, kind, mig):
        move = self.moves.get(mig)
        if move is None:
            return
        inst, role = move["inst"], move["role"]
        if kind == "finish":
            if move["finished"]:
                return
            if role == "source":
                self.instances.pop(inst, None)
            else:
                self.instances[inst] = move["new"]
            if move["kind"] in SELF_CONFIRMING:
                del self.moves[mig]
            else:
                move["finished"] = True
        elif kind == "confirm":
            if role == "same" and not move["finished"]:
                self.instances[inst] = move["new"]
            del self.moves[mig]
        elif kind == "revert":
            if role == "dest":
                self.instances.pop(inst, None)
            elif role == "same" or inst not in self.instances:
                self.instances[inst] = move["old"]
            del self.moves[mig]

    def usage(self):
        """Recount from scratch: (vcpus, memory_mb, disk_gb) held."""
        total = [0, 0, 0]
        same = {m["inst"]: m for m in self.moves.values() if m["role"] == "same"}
        held = []
        for inst, flavor in self.instances.items():
            if inst in same:
                held.append(tuple(map(max, same[inst]["old"], same[inst]["new"])))
            else:
                held.append(flavor)
        for m in self.moves.values():
            if m["inst"] in self.instances:
                continue
            if m["role"] == "dest" and not m["finished"]:
                held.append(m["new"])
            elif m["role"] == "source" and m["finished"]:
                held.append(m["old"])
        for vcpus, memory, disk in held:
            total[0] += vcpus
            total[1] += memory
            total[2] += disk
        return tuple(total)

    def view(self):
        return (
            dict(self.instances),
            {k: (m["inst"], m["finished"]) for k, m in self.moves.items()},
        )


def restored(tmp_path):
    tracker, store = make_tracker(tmp_path)
    try:
        snap = tracker.update_host(HOST)
    finally:
        store.close()
    instances = {
        i.uuid: (i.flavor.vcpus, i.flavor.memory_mb, i.flavor.root_gb) for i in snap.instances
    }
    moves = {m.uuid: (m.instance_uuid, m.status == "finished") for m in snap.migrations}
    usage = (snap.usage["VCPU"], snap.usage["MEMORY_MB"], snap.usage["DISK_GB"])
    return tracker.node_uuid, (instances, moves), usage


def test_acknowledged_operations_survive_sigkill(tmp_path):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    model = Model()
    model.node, _, _ = restored(tmp_path)
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    acknowledged = 0
    for round_ in range(ROUNDS):
        proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tmp_path), str(rng.randrange(2**31))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=top,
        )
        lines = []
        try:
            for _ in range(rng.randint(1, 80)):
                line = proc.stdout.readline()
                if not line:
                    proc.wait(10)
                    pytest.fail(f"worker died (seed {seed}): {proc.stderr.read()[-2000:]}")
                lines.append(line.strip())
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        lines += proc.stdout.read().splitlines()  # what it printed before dying
        in_flight = None
        for line in lines:
            if line.startswith("B "):
                in_flight = json.loads(line[2:])
            elif line == "A":
                model.apply(in_flight)
                acknowledged += 1
                in_flight = None
            elif line == "R":
                in_flight = None
        _, state, usage = restored(tmp_path)
        candidates = [model]
        if in_flight is not None:
            landed = copy.deepcopy(model)
            landed.apply(in_flight)
            candidates.append(landed)
        matches = [m for m in candidates if m.view() == state]
        assert matches, (
            f"round {round_} (seed {seed}): restored state matches neither the "
            f"acknowledged operations nor them plus the one in flight {in_flight}"
        )
        model = matches[-1]
        assert usage == model.usage(), f"round {round_} (seed {seed}): usage != recount"
    assert acknowledged > ROUNDS  # the worker really worked
