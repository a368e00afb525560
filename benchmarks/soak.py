"""Crash-loop soak: the agent SIGKILLed ROUNDS times with claims and moves
in flight over its two nodes; after each restart its state equals the model
of acknowledged calls and Placement equals a recount (benchmarks/common/soak.py
says what each check compares).

Run by ``make soak`` (ROUNDS=500 by default), not by ``make bench``, ``make
test`` or CI; tests/functional/test_soak.py runs 5 rounds of it. One real
Placement process (SQLite, loopback) and one state directory, both private
and removed at the end. Prints key=value lines, the last a summary:

    rounds=R checks=C acknowledged=A claims=N crossed=X kills_mid_call=K
    in_flight_landed=L healed=H refused=F unsettled=U
    lost_acknowledged=0 placement_mismatches=0 seconds=S rounds_per_s=..
    summary ... PASS|FAIL|VOID

and a ``progress`` line every 50 rounds.

FAIL: an acknowledged call lost (or its usage miscounted), a Placement
mismatch, or a restarted agent that did not settle. VOID: fewer rounds ran
than asked (time bound or an error), no kill landed inside a call, no move
between the two nodes, no healing checked, or too few calls acknowledged.

``--skip-healing`` (a negative control) turns the agent's allocation
healing off in the child; released consumers then keep their allocations
and the soak FAILs with Placement mismatches.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import soak
from benchmarks.common.verdict import run as run_benchmark
from rtagent.testing.placement_server import PlacementServer

PROGRESS_EVERY = 50


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", "500")))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=3600.0,
        help="stop after this long (the run is then VOID)",
    )
    parser.add_argument("--skip-healing", action="store_true", help="negative control")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    print(f"seed={seed} rounds_wanted={args.rounds}", flush=True)
    workdir = tempfile.mkdtemp(prefix="rtagent-soak-")
    started = time.monotonic()
    try:
        with PlacementServer(os.path.join(workdir, "placement"), db_sync=False) as server:
            run = soak.Soak(
                os.path.join(workdir, "agent"),
                server.endpoint,
                seed,
                control="skip-healing" if args.skip_healing else None,
            )

            def progress(f):
                if f.rounds % PROGRESS_EVERY == 0:
                    print(
                        f"progress rounds={f.rounds} lost_acknowledged={f.lost_acknowledged} "
                        f"placement_mismatches={f.placement_mismatches} "
                        f"seconds={time.monotonic() - started:.1f}",
                        flush=True,
                    )

            figures = run.run(args.rounds, started + args.max_seconds, progress)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    seconds = time.monotonic() - started
    return report(figures, args.rounds, seconds)


def report(figures, wanted, seconds):
    """Print the figures and the summary. :returns: the exit status."""
    f = figures
    print(f"rounds={f.rounds} checks={f.checks} acknowledged={f.acknowledged} claims={f.claims}")
    print(
        f"crossed={f.crossed} kills_mid_call={f.kills_mid_call} "
        f"in_flight_landed={f.in_flight_landed} healed={f.healed} refused={f.refused} "
        f"unsettled={f.unsettled}"
    )
    print(f"lost_acknowledged={f.lost_acknowledged}")
    print(f"placement_mismatches={f.placement_mismatches}")
    print(f"seconds={seconds:.1f} rounds_per_s={f.rounds / seconds:.2f}")
    for failure in f.failures[:10]:
        print(f"failure {failure}")
    failed = f.lost_acknowledged or f.placement_mismatches or f.unsettled or f.failures
    void = [
        name
        for name, bad in (
            ("rounds", f.rounds < wanted),
            ("no_kill_mid_call", not f.kills_mid_call),
            ("no_cross_move", not f.crossed),
            ("no_healing", not f.healed),
            ("few_acknowledged", f.acknowledged < f.rounds),
        )
        if bad
    ]
    if failed:
        verdict = "FAIL"
    elif void:
        verdict = "VOID"
    else:
        verdict = "PASS"
    print(
        f"summary rounds={f.rounds} lost_acknowledged={f.lost_acknowledged} "
        f"placement_mismatches={f.placement_mismatches} "
        f"{'void=' + ','.join(void) + ' ' if void and not failed else ''}{verdict}",
        flush=True,
    )
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
