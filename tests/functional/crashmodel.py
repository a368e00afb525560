"""The crash tests' shared parts: random steps, their calls, the model.

A *step* is a list of ``[node index, call]``: one call, or every call of a
move's step on the nodes of this agent that it involves (as a conductor
calls each of them). A driver says each step (``S``), each call before it
makes it (``B``), and acknowledges it after it returns (``A``) or says the
step was refused (``R``); :func:`replay` turns those lines back into the
acknowledged calls, the one in flight at a kill, and the rest of its step.
:class:`Model` is a node's record of the acknowledged calls by the tests'
own rules, never by the tracker's code.

Used by ``tests/functional/test_crash.py`` (trackers over a store, killed
in a worker) and ``benchmarks/common/soak.py`` (the whole agent with its
Placement sync and healing, killed in a child process).
"""

import json
import uuid

from rtagent.tracker.model import Flavor
from tests.unit.test_numa_claims import PINNED

SELF_CONFIRMING = {"live-migration", "evacuation"}
OTHER = "99999999-9999-9999-9999-999999999999"  # a node of another agent
# What a claim or a move asks for in the PCI mode (an alias or a spec).
PCI_ASKS = (
    [],
    [{"alias": "vf", "count": 1}],
    [{"alias": "vf", "count": 2}],
    [{"alias": "pf", "count": 1}],
    [{"spec": [{"vendor_id": "10de"}], "count": 1}],
    [{"alias": "vf", "count": 1}, {"spec": [{"vendor_id": "10de"}], "count": 1}],
)


def call(tracker, op):
    """Make the tracker call ``op`` names (a list, as JSON carries it)."""
    # A claim's or a start's last two elements: whether the guest is
    # pinned, and its PCI requests.
    if op[0] == "claim":
        tracker.instance_claim(
            op[1], Flavor(*op[2]), extra_specs=PINNED if op[3] else None, pci_requests=op[4]
        )
    elif op[0] == "abort":
        tracker.abort_instance_claim(op[1])
    elif op[0] == "start":
        _, mig, mtype, inst, source, dest, old, new, pinned, asks = op
        tracker.start_move(
            mig,
            inst,
            mtype,
            source_node=source,
            dest_node=dest,
            old_flavor=Flavor(*old),
            new_flavor=Flavor(*new),
            extra_specs=PINNED if pinned else None,
            pci_requests=asks,
        )
    else:
        getattr(tracker, op[0] + "_move")(op[1])


def pick_step(rng, trackers, nodes, numa=False, pci=False):
    """A random step as a list of (node index, call); a move's step lists
    every node of this agent that the move involves."""

    def flavor():
        return [rng.randint(1, 2) if numa else 1, rng.randint(1, 8), rng.randint(0, 2)]

    def pins():
        return numa and rng.random() < 0.5

    def asks():
        return rng.choice(PCI_ASKS) if pci else None

    snaps = [t.snapshot() for t in trackers]
    moving = {m.instance_uuid for s in snaps for m in s.migrations}
    idle = [(n, i) for n, s in enumerate(snaps) for i in s.instances if i.uuid not in moving]
    migrations = {m.uuid: m for s in snaps for m in s.migrations}
    kinds = ["claim", "claim", "abort", "same", "in", "out"]
    kinds += ["cross", "cross"] if len(nodes) > 1 else []
    kind = rng.choice([*kinds, "finish", "finish", "confirm", "revert"])
    if kind in ("finish", "confirm", "revert") and migrations:
        move = migrations[rng.choice(sorted(migrations))]
        ours = [n for n, u in enumerate(nodes) if u in (move.source_node, move.dest_node)]
        rng.shuffle(ours)
        return [[n, [kind, move.uuid]] for n in ours]
    if kind == "in":
        n = rng.randrange(len(nodes))
        mtype = rng.choice(["resize", "migration", "live-migration", "evacuation"])
        old = flavor()
        new = flavor() if mtype == "resize" else old
        inst = str(uuid.uuid4())
        op = ["start", str(uuid.uuid4()), mtype, inst, OTHER, nodes[n], old, new, pins(), asks()]
        return [[n, op]]
    if kind in ("claim", "finish", "confirm", "revert") or not idle:
        claim = ["claim", str(uuid.uuid4()), flavor(), pins(), asks()]
        return [[rng.randrange(len(nodes)), claim]]
    n, inst = rng.choice(idle)
    old = [inst.flavor.vcpus, inst.flavor.memory_mb, inst.flavor.root_gb]
    pinned = inst.numa is not None
    if kind == "abort":
        return [[n, ["abort", inst.uuid]]]
    if kind == "same":
        mig = str(uuid.uuid4())
        op = ["start", mig, "resize", inst.uuid, nodes[n], nodes[n], old, flavor(), pinned, asks()]
        return [[n, op]]
    mtype = rng.choice(["resize", "migration", "live-migration"])
    new = flavor() if mtype == "resize" else old
    if kind == "out":
        op = ["start", str(uuid.uuid4()), mtype, inst.uuid, nodes[n], OTHER, old, new, pinned, None]
        return [[n, op]]
    dest = 1 - n  # cross: between the two nodes of this agent
    op = ["start", str(uuid.uuid4()), mtype, inst.uuid, nodes[n], nodes[dest], old, new, pinned]
    op.append(asks())
    return [[dest, op], [n, op]]  # the destination first: it claims


class Model:
    """The test's own record of one node's acknowledged calls, by its own rules."""

    def __init__(self, node):
        self.instances = {}  # uuid -> (vcpus, memory_mb, disk_gb)
        self.moves = {}  # uuid -> dict(role, kind, inst, old, new, finished, old_pci, new_pci)
        self.pci = {}  # instance uuid -> how many PCI devices it holds (when any)
        self.node = node

    def apply(self, op):
        kind = op[0]
        if kind == "claim":
            if op[1] not in self.instances:  # a repeated claim changes nothing
                self._set_pci(op[1], _devices(op[4]))
            self.instances[op[1]] = tuple(op[2])
        elif kind == "abort":
            self.instances.pop(op[1], None)
            self.pci.pop(op[1], None)
            self.moves = {k: m for k, m in self.moves.items() if m["inst"] != op[1]}
        elif kind == "start":
            _, mig, mtype, inst, source, dest, old, new, _, asks = op
            if mig in self.moves:
                return  # a repeated start changes nothing
            role = "same" if source == dest else ("source" if source == self.node else "dest")
            self.moves[mig] = dict(
                role=role,
                kind=mtype,
                inst=inst,
                old=tuple(old),
                new=tuple(new),
                finished=False,
                old_pci=self.pci.get(inst, 0) if role != "dest" else 0,
                new_pci=_devices(asks) if role != "source" else 0,
            )
        else:
            self._step(kind, op[1])

    def _set_pci(self, inst, count):
        if count:
            self.pci[inst] = count
        else:
            self.pci.pop(inst, None)

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
                self.pci.pop(inst, None)
            else:
                self.instances[inst] = move["new"]
                self._set_pci(inst, move["new_pci"])
            if move["kind"] in SELF_CONFIRMING:
                del self.moves[mig]
            else:
                move["finished"] = True
        elif kind == "confirm":
            if role == "same" and not move["finished"]:
                self.instances[inst] = move["new"]
                self._set_pci(inst, move["new_pci"])
            del self.moves[mig]
        elif kind == "revert":
            if role == "dest":
                self.instances.pop(inst, None)
                self.pci.pop(inst, None)
            elif role == "same" or inst not in self.instances:
                self.instances[inst] = move["old"]
                self._set_pci(inst, move["old_pci"])
            del self.moves[mig]

    def usage(self):
        """Recount from scratch: (vcpus, memory_mb, disk_gb) held."""
        total = [0, 0, 0]
        same = {m["inst"]: m for m in self.moves.values() if m["role"] == "same"}
        held = []
        for inst, flavor in self.instances.items():
            if inst in same:
                # a same-node resize holds both flavors until confirm/revert
                held.append(same[inst]["old"])
                held.append(same[inst]["new"])
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
            dict(self.pci),
            {k: m["new_pci"] for k, m in self.moves.items() if m["new_pci"]},
        )


def _devices(asks):
    """How many devices PCI requests (a claim's or a move's) take."""
    return sum(a["count"] for a in asks or ())


def drive(conn, do, next_step, resume, refusals):
    """Make steps until killed, saying each on ``conn`` (a multiprocessing
    connection): ``resume`` first (the rest of a step a kill cut short, as
    a conductor retries it), then ``next_step()`` for ever.

    :param do: callable(node index, call) that makes one call.
    :param refusals: exception classes that refuse a call; the rest of its
        step is not called.
    """

    def say(line):
        conn.send_bytes(line.encode())

    def run(step):
        say("S " + json.dumps(step))
        for index, op in step:
            say("B " + json.dumps([index, op]))
            try:
                do(index, op)
            except refusals:
                say("R")
                return
            say("A")

    if resume:
        run(resume)
    while True:
        run(next_step())


def drain(reader):
    """The lines a killed driver sent before it died (what ``reader``, a
    multiprocessing connection, still holds); the reader is closed."""
    lines = []
    while reader.poll(0):
        try:
            lines.append(reader.recv_bytes().decode())
        except EOFError:
            break
    reader.close()
    return lines


def replay(models, lines):
    """Apply the acknowledged calls of ``lines`` to ``models``.

    :returns: (the call in flight as (node, op) or None, the rest of the
        step it belongs to, from that call on).
    """
    step, done, in_flight = None, 0, None
    for line in lines:
        if line.startswith("S "):
            step, done = json.loads(line[2:]), 0
        elif line.startswith("B "):
            in_flight = json.loads(line[2:])
        elif line == "A":
            node, op = in_flight
            models[node].apply(op)
            done += 1
            in_flight = None
        elif line == "R":
            step, in_flight = None, None
    rest = step[done:] if step is not None and done < len(step) else None
    return in_flight, rest


def crosses(step_line, nodes):
    """True for a step that starts a move between two nodes of this agent."""
    op = json.loads(step_line[2:])[0][1]
    return op[0] == "start" and op[4] != op[5] and {op[4], op[5]} <= set(nodes)
