"""A NUMA claim's in-lock work does not grow with the NUMA guests a node holds.

A NUMA claim places the guest's cells on the node's cells *with their
usage*: every pinned CPU, shared vCPU, MiB and page the node's NUMA claims
hold. Summing every claim for each new one is O(N) under the tracker lock;
the tracker carries the usage from state to state instead. This measures the
CPU time of the claim transition (the pure function the tracker runs under
its lock, without the durable write) on a node holding N=0 and N=1000 NUMA
guests, in the same run.

Prints key=value lines, the last a summary:

    guests=0 claim_cpu_p50_us=U
    guests=1000 claim_cpu_p50_us=U
    claim_cpu_ratio_n1000_vs_n0=R claim_cpu_ratio_n1000_vs_n0_spread=LO..HI
        claim_cpu_ratio_n1000_vs_n0_reps=K target<=1.5 verdict=V
    summary claim_cpu_ratio_n1000_vs_n0=R claim_cpu_ratio_n1000_vs_n0_spread=LO..HI
        claim_cpu_ratio_n1000_vs_n0_reps=K target=1.5 PASS|MISS|VOID

The two nodes are measured in interleaved rounds (the order swapped every
other round), SAMPLES // ROUNDS claims each per round; each round gives one
ratio (its N=1000 median over its N=0 median), and the figure is the
median of the rounds' ratios, its ``_spread`` that median's 95% confidence
interval (``benchmarks.common.spread``). PASS when the median is within 1.5
and the spread's top within 1.65 (the target + 10%); MISS when the median
is above 1.5 and the spread's bottom above 1.35; VOID otherwise (the
spread straddles the target by more than 10%: too busy a machine).

The node: 2 cells of 16 cores x 2 threads, 16 dedicated cores per cell,
``[DEFAULT] cpu_allocation_ratio`` high enough for every guest; the N
guests ask for ``hw:numa_nodes=1`` (a shared NUMA guest: its vCPUs, memory
and cell count, no pinning), and the measured claims for
``hw:cpu_policy=dedicated`` (2 pinned vCPUs), the work a pinned build does.

``--recount`` (a negative control) makes the node sum every claim it holds
for each NUMA claim, as a first version did; the ratio then exceeds the
target and the run MISSes.
"""

import argparse
import gc
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import spread
from benchmarks.common.verdict import run as run_benchmark
from rtagent.numa import usage as numa_usage
from rtagent.tracker import claims, requests
from rtagent.tracker.fits import fit_context
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor
from rtagent.tracker.state import NodeState
from rtagent.virt.host import HostView, NumaCell, NumaCpu

TARGET = 1.5
HIGH = 1000
SAMPLES = 1200
ROUNDS = 40
NODE = "4f0a4e8a-6b43-4a2c-9c0e-6a1d2f3b4c5d"


def host():
    cells = []
    for cell_id in range(2):
        first = cell_id * 32
        cpus = tuple(
            NumaCpu(
                id=first + i,
                socket_id=cell_id,
                core_id=i // 2,
                siblings=frozenset({first + i - i % 2, first + i - i % 2 + 1}),
            )
            for i in range(32)
        )
        cells.append(NumaCell(cell_id, 262144, cpus, pages=((4, 262144 * 256),)))
    shared = frozenset(c for cell in cells for c in cell.cpu_ids if c % 32 < 8)
    return HostView(
        "numa-bench",
        "QEMU",
        8002000,
        vcpus=64,
        memory_mb=524288,
        local_gb=1000,
        numa_cells=tuple(cells),
        cpu_shared_set=shared,
        cpu_dedicated_set=frozenset(range(64)) - shared,
    )


def node_with(guests):
    """A node state holding ``guests`` shared NUMA guests."""
    policy = ResourcePolicy(reserved_host_memory_mb=0, ratios={"VCPU": 1000.0, "MEMORY_MB": 10.0})
    state = NodeState(NODE).with_inputs(host=host(), policy=policy)
    shared = {"hw:numa_nodes": "1"}
    flavor = Flavor(1, 64)
    guest = requests.topology(flavor, shared)
    for _ in range(guests):
        ctx = fit_context(state, False)
        instance = requests.instance(str(uuid.uuid4()), flavor, guest=guest)
        state = claims.claim_instance(state, ctx, instance, guest=guest)
    return state


def claim_cpu_us(states):
    """CPU times (us) of one pinned claim's transition on each state,
    measured in interleaved rounds (the order swapped every other round) so
    that a change in the machine's load hits every state alike: per state,
    one list per round."""
    flavor = Flavor(2, 512)
    guest = requests.topology(flavor, {"hw:cpu_policy": "dedicated"})
    contexts = [fit_context(state, False) for state in states]
    rounds = [[] for _ in states]
    gc.collect()
    order = list(range(len(states)))
    for rnd in range(ROUNDS):
        for index in order if rnd % 2 == 0 else order[::-1]:
            times = []
            for _ in range(SAMPLES // ROUNDS):
                instance = requests.instance(str(uuid.uuid4()), flavor, guest=guest)
                started = time.process_time_ns()
                claims.claim_instance(states[index], contexts[index], instance, guest=guest)
                times.append((time.process_time_ns() - started) / 1000)
            rounds[index].append(times)
    return rounds


def recount(self):
    """The O(N) way: sum every claim held, for each NUMA claim."""
    return numa_usage.with_usage(self.numa_cells, [c for _, c in self.numa_held()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recount", action="store_true", help="negative control")
    args = parser.parse_args()
    if args.recount:
        NodeState.numa_usage = recount
    results = {}
    states = {guests: node_with(guests) for guests in (0, HIGH)}
    for guests, state in states.items():
        held = len([i for i in state.instances.values() if i.numa is not None])
        if held != guests:
            print(f"summary void=guests_not_placed held={held} wanted={guests} VOID")
            return 1
    for guests, rounds in zip(states, claim_cpu_us(list(states.values())), strict=True):
        results[guests] = [statistics.median(times) for times in rounds]
        every = [t for times in rounds for t in times]
        print(f"guests={guests} claim_cpu_p50_us={statistics.median(every):.1f}")
    if not all(results[0]):
        print("summary void=no_measurement VOID")
        return 1
    ratio = spread.judge(
        f"claim_cpu_ratio_n{HIGH}_vs_n0", spread.ratios(results[HIGH], results[0]), TARGET
    )
    print(ratio.line())
    print(f"summary {ratio.fields()} target={TARGET} {ratio.verdict}")
    return 0 if ratio.verdict == spread.PASS else 1


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
