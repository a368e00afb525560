"""Invariant 4: nothing acknowledged is lost, nothing is counted twice.

A real child process drives trackers through random claims, aborts and
moves (start, finish, confirm, revert; as source, destination and same
node), some pinning CPUs or taking PCI devices, and is killed with SIGKILL
at a random point, round after round. It
runs one node, or two nodes of one agent over one store with moves between
them, where each step of a move is called on both nodes, in a random order,
as a conductor calls it. Before each call the worker says what it is about
to do, and after the call returns it acknowledges it. After each kill the
test reopens the state directory and checks it against its own model of the
acknowledged calls (the one in flight may or may not have landed, but
nothing else may differ), then recounts the usage from scratch from that
model, and the held PCI devices from the restored rows (no device held by
two instances, never a PF with one of its VFs, the device table exactly
what the rows hold). A step cut short by the kill is finished by the next worker first,
as a conductor retries it.

Workers are forked from a forkserver that has imported the code once, so
that a round costs a fork rather than an interpreter start.
"""

import copy
import dataclasses
import multiprocessing
import os
import random
import traceback

import pytest
from oslo_concurrency import lockutils

from rtagent.conf.pci import PciConfig
from rtagent.pci import alias, spec
from rtagent.pci import model as pcimodel
from rtagent.pci.errors import DevicesUnavailable
from rtagent.tracker import identity
from rtagent.tracker.errors import ComputeResourcesUnavailable
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.store import Store
from rtagent.tracker.tracker import Tracker
from tests.functional.crashmodel import (
    Model,
    call,
    crosses,
    drain,
    drive,
    pick_step,
    replay,
)
from tests.functional.numa_host import read_host
from tests.unit.helpers import HOST
from tests.unit.test_numa_claims import recounted

pytestmark = pytest.mark.functional

# The second node of a two-node agent; the first is the compute_id node.
SECOND_NODE = "bbbbbbbb-0000-4000-8000-000000000002"
HOSTS = (HOST, dataclasses.replace(HOST, hypervisor_hostname="node2"))
# The 2-socket host as the libvirt driver reads it (24 dedicated CPUs on
# sibling threads): some claims and moves pin.
_TWO_SOCKETS = read_host()
NUMA_HOSTS = tuple(
    dataclasses.replace(_TWO_SOCKETS, hypervisor_hostname=name, domains=())
    for name in ("node1", "node2")
)
# A PF with 3 VFs and two GPUs, on each node of the PCI mode.
_PF = pcimodel.HostDevice("0000:3b:00.0", "8086", "1572", pcimodel.TYPE_PF, 0, devname="ens1f0")
PCI_DEVICES = (
    _PF,
    *(
        pcimodel.HostDevice(f"0000:3b:02.{fn}", "8086", "154c", pcimodel.TYPE_VF, 0, _PF.address)
        for fn in range(3)
    ),
    pcimodel.HostDevice("0000:af:00.0", "10de", "1eb8", pcimodel.TYPE_PCI, 1),
    pcimodel.HostDevice("0000:b0:00.0", "10de", "1eb8", pcimodel.TYPE_PCI, 1),
)
PCI_HOSTS = tuple(dataclasses.replace(h, pci_devices=PCI_DEVICES) for h in HOSTS)
PCI = PciConfig(
    device_specs=spec.parse_device_specs(['{"devname": "ens1f0"}', '{"vendor_id": "10de"}']),
    aliases=alias.parse_aliases(
        [
            '{"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}',
            '{"name": "pf", "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF"}',
        ]
    ),
)
_FORK = multiprocessing.get_context("forkserver")
_FORK.set_forkserver_preload([__name__])
# oslo.concurrency imports eventlet when a process makes its first lock (half
# a second): make one on import, so that the forkserver pays for it once.
lockutils.ReaderWriterLock()


def open_nodes(state_path, count, numa=False, pci=False):
    """``count`` trackers over one store in ``state_path``, hosts read."""
    store = Store(str(state_path))
    first = identity.load_or_create(str(state_path), store)
    policy = ResourcePolicy(reserved_host_memory_mb=0)
    config = PCI if pci else None
    trackers = [Tracker(u, store, policy, pci=config) for u in (first, SECOND_NODE)[:count]]
    hosts = NUMA_HOSTS if numa else PCI_HOSTS if pci else HOSTS
    snaps = [t.update_host(h) for t, h in zip(trackers, hosts, strict=False)]
    return trackers, snaps, store


# -- the worker (runs in the child) ---------------------------------------


def worker(conn, state_path, seed, count, resume, numa, pci):
    """Call random steps until killed; say each call before and after."""
    try:
        _work(conn, state_path, seed, count, resume, numa, pci)
    except BaseException:
        conn.send_bytes(("E " + traceback.format_exc()).encode())
        raise


def _work(conn, state_path, seed, count, resume, numa, pci):
    rng = random.Random(seed)
    trackers, _, _ = open_nodes(state_path, count, numa, pci)
    nodes = [t.node_uuid for t in trackers]

    drive(
        conn,
        lambda index, op: call(trackers[index], op),
        lambda: pick_step(rng, trackers, nodes, numa, pci),
        resume,
        (ComputeResourcesUnavailable, DevicesUnavailable),
    )


# -- the test's model --------------------------------------------------------


def restored(tmp_path, count, numa=False, pci=False):
    """Reopen the state directory: per node, (view, usage) as the store holds it."""
    trackers, snaps, store = open_nodes(tmp_path, count, numa, pci)
    store.close()
    result = []
    for snap in snaps:
        check_pins(snap)
        check_devices(snap)
        instances = {
            i.uuid: (i.flavor.vcpus, i.flavor.memory_mb, i.flavor.root_gb) for i in snap.instances
        }
        moves = {m.uuid: (m.instance_uuid, m.status == "finished") for m in snap.migrations}
        devices = {i.uuid: len(i.pci_devices) for i in snap.instances if i.pci_devices}
        new_devices = {m.uuid: len(m.new_pci) for m in snap.migrations if m.new_pci}
        vcpus = snap.usage.get("VCPU", 0) + snap.usage.get("PCPU", 0)
        usage = (vcpus, snap.usage["MEMORY_MB"], snap.usage["DISK_GB"])
        result.append(((instances, moves, devices, new_devices), usage))
    return [t.node_uuid for t in trackers], result


def pinned_claims(tmp_path, count, numa, pci=False):
    """How many claims with pinned CPUs, and how many PCI devices held, the
    nodes have now."""
    _, snaps, store = open_nodes(tmp_path, count, numa, pci)
    store.close()
    pinned = sum(1 for snap in snaps for _, claim in snap.numa_claims if claim.pinned)
    return pinned, sum(1 for snap in snaps for d in snap.pci_devices if d.held)


def check_devices(snap):
    """Every PCI device the rows hold is held by one instance only, never a
    PF with one of its VFs, and the device table holds exactly those: by
    this test's own reading of the rows (an instance here holds its
    devices; the latest move of an instance not here holds its side here;
    a same-node resize holds both sides)."""
    here = {i.uuid: i for i in snap.instances}
    latest = {}
    for move in snap.migrations:
        if move.instance_uuid not in latest or move.seq > latest[move.instance_uuid].seq:
            latest[move.instance_uuid] = move
    holds = [(i.uuid, h) for i in snap.instances for h in i.pci_devices]
    for move in latest.values():
        if move.same_node:
            mine = here[move.instance_uuid].pci_devices if move.instance_uuid in here else ()
            sides = [h for h in move.old_pci + move.new_pci if h not in mine]
        elif move.instance_uuid in here:
            sides = []
        else:
            sides = move.new_pci if move.dest_node == snap.node_uuid else move.old_pci
        holds += [(move.instance_uuid, h) for h in sides]
    owner = {}
    for inst, h in holds:
        assert h.address not in owner, f"{h.address} held by {owner[h.address]} and {inst}"
        owner[h.address] = inst
    for address in owner:
        dev = next(d for d in PCI_DEVICES if d.address == address)
        assert dev.parent_addr not in owner, f"PF {dev.parent_addr} held with its VF {address}"
    assert {d.address: d.instance_uuid for d in snap.pci_devices if d.held} == owner


def check_pins(snap):
    """Every dedicated CPU is kept by at most one claim the node holds, and
    the cells' pinned CPUs are exactly those claims' CPUs."""
    owner = {}
    for consumer, claim in snap.numa_claims:
        for cpu in claim.pinned:
            assert cpu not in owner or owner[cpu] == consumer, (
                f"CPU {cpu} kept by {owner[cpu]} and {consumer}"
            )
            owner[cpu] = consumer
    assert set().union(*(c.pinned for c in snap.numa_cells)) == set(owner)
    assert set(owner) <= (snap.host.cpu_dedicated_set or set())
    assert snap.numa_cells == recounted(snap)


def run_worker(tmp_path, seed, count, resume, wanted, numa=False, pci=False):
    """Fork a worker, read ``wanted`` of its lines, SIGKILL it; every line it
    sent before dying."""
    reader, writer = _FORK.Pipe(duplex=False)
    proc = _FORK.Process(
        target=worker, args=(writer, str(tmp_path), seed, count, resume, numa, pci), daemon=True
    )
    proc.start()
    writer.close()
    lines = []
    try:
        while len(lines) < wanted:
            assert reader.poll(30), "the worker went silent"
            try:
                lines.append(reader.recv_bytes().decode())
            except EOFError:
                proc.join(10)
                pytest.fail(f"worker died (exit {proc.exitcode}): {lines[-3:]}")
    finally:
        proc.kill()
        proc.join(10)
    lines += drain(reader)
    errors = [line for line in lines if line.startswith("E ")]
    assert not errors, errors[0]
    return lines


@pytest.mark.parametrize(
    "count, rounds, numa, pci",
    [(1, 50, False, False), (2, 50, False, False), (2, 50, True, False), (2, 20, False, True)],
    ids=["one-node", "two-nodes", "two-numa-nodes", "two-pci-nodes"],
)
def test_acknowledged_operations_survive_sigkill(tmp_path, count, rounds, numa, pci):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    nodes, _ = restored(tmp_path, count, numa, pci)
    models = [Model(node) for node in nodes]
    acknowledged, crossed, resume, pinned, devices = 0, 0, None, 0, 0
    for round_ in range(rounds):
        wanted = rng.randint(1, 80)
        lines = run_worker(tmp_path, rng.randrange(2**31), count, resume, wanted, numa, pci)
        acknowledged += lines.count("A")
        crossed += sum(1 for line in lines if line.startswith("S ") and crosses(line, nodes))
        in_flight, resume = replay(models, lines)
        _, state = restored(tmp_path, count, numa, pci)
        found = pinned_claims(tmp_path, count, numa, pci)
        pinned += found[0]
        devices += found[1]
        candidates = [models]
        if in_flight is not None:
            landed = copy.deepcopy(models)
            landed[in_flight[0]].apply(in_flight[1])
            candidates.append(landed)
        matches = [c for c in candidates if [m.view() for m in c] == [s for s, _ in state]]
        assert matches, (
            f"round {round_} (seed {seed}): restored state matches neither the "
            f"acknowledged calls nor them plus the one in flight {in_flight}"
        )
        models = matches[-1]
        for node, (model, (_, usage)) in enumerate(zip(models, state, strict=True)):
            assert usage == model.usage(), f"round {round_} (seed {seed}): node {node} usage"
    assert acknowledged > rounds  # the worker really worked
    assert crossed > 0 or count == 1  # and moved instances between its nodes
    assert pinned > 0 or not numa  # and pinned CPUs
    assert devices > 0 or not pci  # and held PCI devices
