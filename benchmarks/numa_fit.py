"""The NUMA fitter: fits per second on a busy 2-socket host, and agreement
with the brute-force oracle over random small cases.

Prints key=value lines, the last a summary:

    host=empty fits_per_cpu_s=F us_per_fit=U
    host=busy pinned_guests=50 fits_per_cpu_s=F us_per_fit=U
    busy_vs_empty=R busy_vs_empty_spread=LO..HI busy_vs_empty_reps=K target<=3 verdict=V
    oracle cases=N agree=A
    summary busy_vs_empty=R busy_vs_empty_spread=LO..HI busy_vs_empty_reps=K target_ratio=3
        oracle_agreement=X target_agreement=1.0 PASS|MISS|VOID

The host: 2 cells (sockets) of 16 cores x 2 threads, 64 threads, all
dedicated, 64 GiB of 2 MiB and 4 KiB pages. ``busy`` has 50 pinned guests
of 1 vCPU (prefer) already placed; ``empty`` none (the baseline of the same
run). Each fit is a 4-vCPU guest in turn over 1 and 2 cells and each
thread policy (``isolate`` is refused on this SMT host at once, as nova
34 does). The oracle cases are those of tests/unit/numa (up to 4 cells of
8 CPUs, split, dedicated, shared or one-set layouts, and single cells of
cores of 1 to 4 threads); the oracle (``tests/unit/numa/test_fit_oracle``,
a brute-force search) states nova's rules: SMT cells, pinned CPUs,
prefer/isolate/require, mixed guests, emulator threads; they agree with
nova's own cell fit (``tests/nova/test_numa_thread_policies_against_nova``).
Agreement is the share where the fitter finds a fit exactly when the
oracle says one exists, and the fit it finds obeys every rule; it must be
1.0.

The fit times are CPU time (``time.process_time``), the two hosts in
interleaved rounds (``benchmarks.common.spread.interleaved``: empty, busy;
busy, empty; ...), each round every shape FITS_PER_SHAPE times on each
host; each round gives one ratio (busy / empty), ``busy_vs_empty`` is the
median of the rounds' ratios and its ``_spread`` that median's 95%
confidence interval. PASS when the median is within 3 and the spread's top
within 3.3 (the target + 10%); MISS when the median is above 3 and the
spread's bottom above 2.7; VOID otherwise (too busy a machine to tell).
The agreement is a count: any case short of 1.0 is a MISS.

``--greedy-require`` (a negative control) replaces the exact search for
``require`` with filling the fullest cores in turn; the agreement then
falls below 1.0 and the run MISSes.
"""

import argparse
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import spread
from benchmarks.common.verdict import run as run_benchmark
from rtagent.numa import fit, model

TARGET_RATIO = 3.0
ORACLE_CASES = 2000
ROUNDS = 100
FITS_PER_SHAPE = 2


def host(busy):
    cells, pinned_left = [], 50 if busy else 0
    for cell_id in range(2):
        cpus = range(cell_id * 32, cell_id * 32 + 32)
        siblings = tuple(frozenset((c, c + 1)) for c in cpus[::2])
        # One thread of each core first, as pinned guests of 1 vCPU fill a host.
        take = min(pinned_left, 25)
        pinned = frozenset(list(cpus[::2])[:16] + list(cpus[1::2])[:9])
        pinned = frozenset(sorted(pinned)[:take])
        pinned_left -= take
        cells.append(
            model.HostCell(
                id=cell_id,
                cpuset=frozenset(),
                pcpuset=frozenset(cpus),
                memory_mb=32768,
                siblings=siblings,
                pinned=pinned,
                memory_usage=take * 256,
                pages=(model.Pages(4, 4194304, take * 65536), model.Pages(2048, 8192)),
            )
        )
    return tuple(cells)


def guests():
    shapes = []
    for policy in model.THREAD_POLICIES:
        shapes.append(
            (model.GuestCell(0, 1024, pcpuset=frozenset(range(4)), thread_policy=policy),)
        )
        shapes.append(
            (
                model.GuestCell(0, 512, pcpuset=frozenset({0}), thread_policy=policy),
                model.GuestCell(1, 512, pcpuset=frozenset({1, 2, 3}), thread_policy=policy),
            )
        )
    return shapes


def fits(hosts):
    """A callable fitting every shape FITS_PER_SHAPE times on ``hosts``
    (with and without an emulator CPU in turn); it returns the count."""
    shapes = guests()

    def batch():
        for count in range(FITS_PER_SHAPE):
            for shape in shapes:
                fit.fit(hosts, shape, emulator_isolate=count % 2 == 1)

    return batch, FITS_PER_SHAPE * len(shapes)


def fit_cpu_seconds(rounds):
    """([empty host's CPU seconds per round], [busy host's], fits per batch)."""
    empty, per_batch = fits(host(busy=False))
    busy, _ = fits(host(busy=True))
    empty_s, busy_s = spread.interleaved([empty, busy], rounds)
    return empty_s, busy_s, per_batch


def oracle_agreement(cases):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.unit.numa.test_fit_oracle import cases as case_strategy
    from tests.unit.numa.test_fit_oracle import check_fit, exists, limits, one_cell

    tally = {"cases": 0, "agree": 0}

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.one_of(case_strategy(), one_cell()), limits, st.booleans())
    def compare(case, lim, emulator):
        hosts, guest_cells = case
        found = fit.fit(hosts, guest_cells, lim, emulator_isolate=emulator)
        tally["cases"] += 1
        agree = (found is not None) == exists(hosts, guest_cells, lim, emulator)
        if agree and found is not None:
            try:
                check_fit(hosts, guest_cells, lim, emulator, found)
            except AssertionError:
                agree = False  # a fit that breaks a rule
        tally["agree"] += agree

    compare()
    return tally["cases"], tally["agree"]


def greedy_require(cores, wanted):
    """The negative control: fill the fullest cores, two or more threads
    each, with no search (and not k to a core, as nova's require)."""
    counts = []
    for core in fit._fullest_first(cores):
        take = min(len(core), wanted)
        if take == 1 and wanted % 2 == 0:
            take = 0
        counts.append(take)
        wanted -= take
    return counts if wanted == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greedy-require", action="store_true", help="negative control")
    parser.add_argument("--cases", type=int, default=ORACLE_CASES)
    args = parser.parse_args()
    if args.greedy_require:
        fit._require_counts = greedy_require
    random.seed(0)
    empty_s, busy_s, per_batch = fit_cpu_seconds(ROUNDS)
    empty, busy = statistics.median(empty_s), statistics.median(busy_s)
    for name, seconds in (("host=empty", empty), ("host=busy pinned_guests=50", busy)):
        if seconds > 0:
            print(
                f"{name} fits_per_cpu_s={per_batch / seconds:.0f} "
                f"us_per_fit={1e6 * seconds / per_batch:.1f}"
            )
    ratio = spread.judge("busy_vs_empty", spread.ratios(busy_s, empty_s), TARGET_RATIO)
    print(ratio.line())
    cases, agree = oracle_agreement(args.cases)
    print(f"oracle cases={cases} agree={agree}")
    if not cases or not empty or not busy:
        print("summary void=no_measurement VOID")
        return 1
    agreement = agree / cases
    verdict = spread.combine([ratio.verdict, spread.PASS if agreement == 1.0 else spread.MISS])
    print(
        f"summary {ratio.fields()} target_ratio={TARGET_RATIO:.0f} "
        f"oracle_agreement={agreement:.4f} target_agreement=1.0 {verdict}"
    )
    return 0 if verdict == spread.PASS else 1


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
