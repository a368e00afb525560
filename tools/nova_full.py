#!/usr/bin/env python3
# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Every test of nova 34.0.0's functional tree, on stock nova and with
rtagent, in parts whose results are kept (make test-nova-full,
make test-nova-full-summary; docs/nova-harness.md).

``run --part k/n`` (with the python of ``.venv-nova``) lists nova's
functional tree, takes part k of its split in n (tools/novatests/parts.py),
runs it on stock nova (a test that fails is run again alone: one that then
passes is ``flaky`` on stock), then runs every test stock nova passed with
rtagent in process, judged as ``make test-nova`` judges
(tools/nova_tests.py's Judge: proof per test, docs/nova.md's signatures, a
flake with rtagent counted), and writes
tools/nova-full/part-KK-of-NN.json stamped with the code it ran. It
refuses to start with uncommitted changes under ``rtagent/``; ``--tests``
(a few ids of the part) or a tree with such changes writes only to an
``--out`` directory of your own, and such a part never counts as kept.
It exits 0 when every test of the part has a good outcome, 1 otherwise,
2 when it cannot run or judge.

``summary`` (any python 3; no nova environment) reads the kept parts alone
and prints the whole tree's figures on one line; it exits 1 when a part is
stale, missing or partial, or any test has an outcome that fails
``make test-nova`` (unlisted, flaky, not injected...), 2 when the kept
parts cannot be read.
"""

import argparse
import hashlib
import os
import signal
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "tools"))

from novatests import exceptions, full, parts, record, stamp  # noqa: E402

KEPT = os.path.join(TOP, "tools", "nova-full")
DOC = os.path.join(TOP, "docs", "nova.md")
CONSTRAINTS = os.path.join(TOP, "tools", "nova-constraints.txt")
TREE = r"^nova\.tests\.functional\."
# The split the record is kept in: about half an hour a part on 2 cores
# (part 1 of 100 took 46 s on stock and 107 s with rtagent; docs/nova-harness.md).
PARTS = 8
# Stock nova's hang limit (nova's own OS_TEST_TIMEOUT is 300 s) and its
# run's wall-clock limit: this many times the part's estimated serial time
# divided by the workers, never below the floor.
STOCK_HANG, STOCK_WALL_FACTOR, STOCK_WALL_FLOOR = 330.0, 4.0, 900.0


class CannotRun(Exception):
    """The part cannot be run or kept; one line says why."""


def run(args):
    k, n = parts.parse(args.part)
    nova_tests, st = _nova_side()
    out = os.path.abspath(args.out or KEPT)
    kept = out == os.path.abspath(KEPT)
    if kept and args.tests:
        raise CannotRun("--tests runs only part of a part: give --out, a directory of your own")
    code = _stamp(kept)
    try:
        listed = exceptions.read(args.exceptions)
    except exceptions.ExceptionsError as e:
        raise CannotRun(str(e)) from None
    st.prepare(args.workdir)
    try:
        nova_tests.preflight(args.workdir)
    except nova_tests.CannotJudge as e:
        raise CannotRun(str(e)) from None
    tree_ids = st.list_ids(args.workdir, TREE)
    key = record.environment_key(args.constraints, tree_ids)
    share = parts.split(tree_ids, n)[k - 1]
    ids = _chosen(args.tests, share, f"{k}/{n}")
    estimated = {t: parts.estimate(t) for t in ids}
    print(
        f"part {k}/{n}: {len(ids)} of the tree's {len(tree_ids)} tests, "
        f"estimated {sum(estimated.values()):.0f} s serial on stock, at {code['commit'][:12]}",
        flush=True,
    )
    started = time.monotonic()
    stock = _stock(nova_tests, st, args, ids, estimated)
    walls = {"stock": round(time.monotonic() - started)}
    expected = {
        t: {"status": r["status"], "seconds": r["seconds"]}
        for t, r in stock.items()
        if r["status"] in full.STOCK_PASSES
    }
    flaky = {t for t, r in stock.items() if r["status"] == "flaky"}
    # Every test in process: the RPC link is checked by make test-nova's
    # RPC class and by tests/nova; the tree is about the tracker's answers.
    judge = nova_tests.Judge(args.workdir, listed, flaky, args.concurrency)
    outcomes = judge("inprocess", sorted(expected), expected) if expected else {}
    walls["rtagent"] = round(time.monotonic() - started) - walls["stock"]
    # rtagent/ must not have changed while it ran (a commit elsewhere in the
    # tree may land: the part's commit is the one it started at).
    after = _stamp(kept)
    if (after["rtagent_tree"], after["rtagent_dirty"]) != (
        code["rtagent_tree"],
        code["rtagent_dirty"],
    ):
        raise CannotRun("not kept: rtagent/ changed during the run")
    tests = {}
    for test, result in stock.items():
        outcome, why = outcomes.get(test, (None, ""))
        tests[test] = full.entry(result["status"], result["seconds"], result["why"], outcome, why)
    rec = full.part(
        k,
        n,
        key=key,
        code=code,
        tree_ids=tree_ids,
        share=share,
        tests=tests,
        restricted=bool(args.tests),
    )
    rec["wall_seconds"] = walls
    path = full.write(out, rec)
    nova_tests.report("inprocess", outcomes, expected)
    bad = [o for o, _ in outcomes.values() if o not in nova_tests.verdict.GOOD]
    statuses = [r["status"] for r in stock.values()]
    print(
        f"summary part={k}/{n} tests={len(ids)} stock_passed={len(expected)} "
        f"stock_failed={sum(s not in full.STOCK_PASSES and s != 'skip' for s in statuses)} "
        f"stock_skipped={statuses.count('skip')} rtagent_bad={len(bad)} "
        f"stock_wall={walls['stock']}s rtagent_wall={walls['rtagent']}s "
        f"written={os.path.relpath(path, TOP)} {'FAIL' if bad else 'PASS'}"
    )
    return 1 if bad else 0


def _nova_side():
    """(nova_tests, stestr): they import subunit, which only nova's
    environment has; summary runs without them."""
    try:
        import nova_tests
        from novatests import stestr as st
    except ImportError as e:
        raise CannotRun(f"run needs the python of .venv-nova (make test-nova-full): {e}") from None
    return nova_tests, st


def _stamp(kept):
    """The code's stamp; a part to keep needs rtagent/ committed."""
    try:
        return stamp.read(TOP, allow_dirty=not kept)
    except stamp.StampError as e:
        raise CannotRun(str(e)) from None


def _chosen(tests, share, label):
    """The ids to run: the part's, or the few of them ``tests`` names."""
    if not tests:
        return share
    strangers = sorted(set(tests) - set(share))
    if strangers:
        raise CannotRun(f"not a test of part {label}: {strangers[0]}")
    return sorted(set(tests))


def _stock(nova_tests, st, args, ids, estimated):
    """{test id: {"status", "seconds", "why"}} of ``ids`` on stock nova."""
    env = nova_tests.environment()
    wall = max(STOCK_WALL_FLOOR, STOCK_WALL_FACTOR * sum(estimated.values()) / args.concurrency)
    found = st.Runner(args.workdir, env, "stock", STOCK_HANG).run(
        ids, args.concurrency, wall, estimated
    )
    again_ids = [t for t, r in found.items() if r.status in ("fail", "hung", "not run")]
    again = {}
    if again_ids:
        print(f"stock: {len(again_ids)} tests run again, one at a time", flush=True)
        runner = st.Runner(args.workdir, env, "stock-again", STOCK_HANG)
        again = runner.run(again_ids, 1, max(STOCK_WALL_FLOOR, 2 * len(again_ids) * STOCK_HANG))
    results = {}
    for test, first in found.items():
        second = again.get(test)
        if second is not None and second.status == "success":
            # Failed, then passed alone: flaky on stock; why it failed first.
            shown, status, seconds = first, "flaky", second.seconds
        else:
            shown, status, seconds = second or first, first.status, first.seconds
        why = nova_tests._last_line(shown.text) if shown.status != "success" else ""
        results[test] = {"status": status, "seconds": seconds, "why": why}
    return results


def summary(args):
    try:
        head_tree = stamp.tree(TOP, "HEAD")
        listed = set(exceptions.read(args.exceptions))
        records = full.load_all(args.dir)
        with open(args.constraints, "rb") as f:
            constraints = hashlib.sha256(f.read()).hexdigest()
        figures, problems = full.summarize(records, head_tree, constraints, listed, args.parts)
    except (stamp.StampError, exceptions.ExceptionsError, full.FullRecordError, OSError) as e:
        print(f"nova_full: {e}")
        return 2
    for line in problems:
        print(f"  {line}")
    ok = not problems
    print(" ".join(f"{k}={v}" for k, v in figures.items()) + (" PASS" if ok else " FAIL"))
    return 0 if ok else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run", help="run one part and keep its result")
    go.add_argument("--part", required=True, help="k/n: part k of the tree split in n")
    go.add_argument("--tests", nargs="+", help="only these ids of the part (needs --out)")
    go.add_argument("--out", help=f"where the part's file goes (default {KEPT})")
    # Under make test-nova's own (git-ignored, removed by make clean).
    go.add_argument("--workdir", default=os.path.join(TOP, ".nova-tests", "full"))
    go.add_argument("--concurrency", type=int, default=2)
    go.add_argument("--constraints", default=CONSTRAINTS, help="pins of .venv-nova")
    go.add_argument("--exceptions", default=DOC, help="the document listing the exceptions")
    show = sub.add_parser("summary", help="the whole tree's figures from the kept parts")
    show.add_argument("--dir", default=KEPT, help="the kept parts")
    show.add_argument("--parts", type=int, default=PARTS, help="parts expected when none is kept")
    show.add_argument("--constraints", default=CONSTRAINTS)
    show.add_argument("--exceptions", default=DOC)
    args = parser.parse_args(argv)
    if args.command == "summary":
        return summary(args)
    try:
        return run(args)
    except (parts.PartError, CannotRun, record.RecordError) as e:
        print(f"nova_full: {e}")
        return 2


def _exit_on(signum, _frame):
    # SystemExit unwinds the runs, whose clean-up kills their workers.
    sys.exit(128 + signum)


if __name__ == "__main__":
    for _signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(_signum, _exit_on)
    sys.exit(main())
