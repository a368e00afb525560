#!/usr/bin/env python3
# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova 34.0.0's own functional tests with rtagent as every compute
service's resource tracker, against a recorded baseline (make test-nova).

Run with the python of ``.venv-nova`` (tools/setup-nova-env.sh). nova's
tests are not changed: ``rtagent.nova.testhook`` puts rtagent's tracker in
place when ``RTAGENT_NOVA_TRACKER`` is set, and guards nova's own.

``check`` (the default) runs, with rtagent, every selected test that stock
nova passed in the recorded baseline (tools/nova-baseline.json, written by
``record``: ``make nova-baseline``), once each (one class over
oslo.messaging, the others in process), and gives each test one outcome
(tools/novatests/verdict.py): a pass counts only with rtagent's proof that it served the
test; a failure is excused only by a docs/nova.md entry whose signature it
matches; a flake with rtagent fails the run. It prints

    nova_baseline_passed=N nova_with_rtagent_passed=N nova_with_rtagent_failed=N
    nova_not_injected=N nova_flaky_with_rtagent=N ...

and exits 0 on PASS, 1 on FAIL, 2 when it cannot judge (rtagent not
importable in nova's tests, a record that is not this environment's, a
docs/nova.md table it cannot read), with one line saying why.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TOP, "tools"))

from novatests import exceptions, record, verdict  # noqa: E402
from novatests import stestr as st  # noqa: E402

DOC = os.path.join(TOP, "docs", "nova.md")
RECORD = os.path.join(TOP, "tools", "nova-baseline.json")
CONSTRAINTS = os.path.join(TOP, "tools", "nova-constraints.txt")
# What CI checks (issue 46): issue 14's moves, provider trees, evacuation,
# live migration, CPU traits and resource tracking; issue 15's NUMA; issue
# 16's PCI; and every test of nova's functional/compute. Of the moving
# tests' two nested variants, the one whose flavors also ask the child
# provider for resources (a superset of the other's moves over the same
# tree). functional/regressions and ServerMovingTestsWithNestedComputes
# left CI for the whole-tree record (make test-nova-full), with every other
# test of nova's functional tree.
SUITES = (
    r"^nova\.tests\.functional\."
    r"(test_servers\.ServerMovingTests(\.|WithNestedResourceRequests\.)"
    r"|test_cold_migrate\."
    r"|test_servers_provider_tree\."
    r"|libvirt\.test_evacuate\."
    r"|libvirt\.test_live_migration\."
    r"|libvirt\.test_report_cpu_traits\."
    r"|libvirt\.test_rt_servers\."
    r"|libvirt\.test_numa_servers\."
    r"|libvirt\.test_numa_live_migration\."
    r"|libvirt\.test_pci_sriov_servers\."
    r"|libvirt\.test_pci_in_placement\."
    r"|compute\.)"
)
# One class run again with the agent behind oslo.messaging RPC.
RPC_SUITE = r"^nova\.tests\.functional\.test_servers\.ServerMovingTests\."
# The hang limit is measured: this many times the slowest test the record
# has stock nova pass (2 workers on this machine), and never below FLOOR.
HANG_FACTOR, HANG_FLOOR = 3.0, 120.0
# A run's wall-clock limit: this many times the record's serial time of its
# tests divided by the workers, and never below WALL_FLOOR.
WALL_FACTOR, WALL_FLOOR = 2.5, 600.0

_PREFLIGHT = """
import sys
try:
    import rtagent.nova.testhook  # noqa: F401
except Exception as e:
    print(f"rtagent cannot be imported in nova's environment ({type(e).__name__}: {e})")
    sys.exit(3)
import nova.test
if getattr(nova.test.TestCase.setUp, "rtagent_mode", None) != "inprocess":
    print("rtagent's test hook is not installed in nova's environment "
          "(rtagent_nova_testhook.pth is missing from its site-packages)")
    sys.exit(3)
"""


class CannotJudge(Exception):
    """make test-nova cannot give a verdict; one line says why."""


def preflight(workdir):
    """:raises CannotJudge: rtagent would not be in nova's tests (run where
    the tests run, so the checkout itself is not on the path)."""
    env = dict(os.environ, RTAGENT_NOVA_TRACKER="inprocess")
    done = subprocess.run(
        [sys.executable, "-c", _PREFLIGHT],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        lines = (done.stdout.strip() or done.stderr.strip() or "no reason given").splitlines()
        raise CannotJudge(lines[-1])


def hang_limit(expected):
    slowest = max((entry.get("seconds", 0.0) for entry in expected.values()), default=0.0)
    return max(HANG_FLOOR, HANG_FACTOR * slowest)


def wall(expected, ids, concurrency):
    serial = sum(expected[t].get("seconds", 0.0) for t in ids)
    return max(WALL_FLOOR, WALL_FACTOR * serial / concurrency)


def environment(mode=None, proof_dir=None):
    env = dict(os.environ, OS_TEST_TIMEOUT="300")
    for name in ("RTAGENT_NOVA_TRACKER", "RTAGENT_NOVA_PROOF_DIR"):
        env.pop(name, None)
    if mode:
        env["RTAGENT_NOVA_TRACKER"] = mode
        env["RTAGENT_NOVA_PROOF_DIR"] = proof_dir
    return env


class Judge:
    """Runs tests with rtagent and gives each an outcome.

    :param listed: docs/nova.md's {test id: (signature, reason)}.
    :param flaky_on_stock: the tests the record shows flaky on stock nova.
    """

    def __init__(self, workdir, listed, flaky_on_stock, concurrency):
        self.workdir, self.listed = workdir, listed
        self.flaky_on_stock, self.concurrency = flaky_on_stock, concurrency

    def __call__(self, mode, ids, expected):
        """{test id: (outcome, why)} of ``ids`` run with rtagent in ``mode``."""
        hang = hang_limit(expected)
        run_wall = wall(expected, ids, self.concurrency)
        print(
            f"{mode}: {len(ids)} tests, hang limit {hang:.0f} s, wall {run_wall:.0f} s", flush=True
        )
        signatures = {
            t: verdict.compile_signature(self.listed[t][0]) for t in ids if t in self.listed
        }
        seconds = {t: entry.get("seconds", 0.0) for t, entry in expected.items()}
        first = self._attempts(
            mode, mode, ids, self.concurrency, limits=(hang, run_wall), seconds=seconds
        )
        outcomes, open_ = {}, []
        for test in ids:
            outcome = verdict.first_pass(first[test], signatures.get(test))
            if outcome is None:
                open_.append(test)
            else:
                outcomes[test] = (outcome, _why(outcome, first[test]))
        if not open_:
            return outcomes
        print(f"{mode}: {len(open_)} tests run again, one at a time", flush=True)
        limits = (hang, wall(expected, open_, 1))
        again = self._attempts(mode, f"{mode}-again", open_, 1, limits=limits, seconds=seconds)
        need_stock = [t for t in open_ if verdict.needs_stock_run(again[t], signatures.get(t))]
        stock = {}
        if need_stock:
            print(f"{mode}: {len(need_stock)} tests run on stock nova", flush=True)
            runner = st.Runner(self.workdir, environment(), f"{mode}-stock", hang)
            for test, result in runner.run(need_stock, 1, wall(expected, need_stock, 1)).items():
                stock[test] = verdict.Attempt(result.status, result.text)
        for test in open_:
            outcome = verdict.after_rerun(
                again[test],
                signatures.get(test),
                test in self.flaky_on_stock,
                stock.get(test),
                first_ran=first[test].status != "not run",
            )
            outcomes[test] = (outcome, _why(outcome, first[test], again[test]))
        return outcomes

    def _attempts(self, mode, label, ids, concurrency, *, limits, seconds):
        """{test id: verdict.Attempt} of one run of ``ids`` with rtagent.

        :param seconds: {test id: the record's seconds}, to share the tests
            out among the workers.
        """
        proof_dir = os.path.join(self.workdir, f"proof-{label}")
        shutil.rmtree(proof_dir, ignore_errors=True)
        os.makedirs(proof_dir)
        hang, run_wall = limits
        runner = st.Runner(self.workdir, environment(mode, proof_dir), label, hang)
        found = runner.run(ids, concurrency, run_wall, seconds)
        return {
            t: verdict.Attempt(r.status, r.text, _proof(proof_dir, t, r.scenarios))
            for t, r in found.items()
        }


def _proof(proof_dir, test, scenarios=()):
    """The test's proof record; for a test with scenarios, the one that
    proves least (rtagent writes one per scenario: its own test id), or
    None when a scenario wrote none."""
    if not scenarios:
        return _read_proof(os.path.join(proof_dir, f"{test}.json"))
    proofs = [_read_proof(os.path.join(proof_dir, f"{test}({s}).json")) for s in scenarios]
    if any(proof is None for proof in proofs):
        return None
    rank = {verdict.NOT_INJECTED: 0, verdict.TRACKER_UNUSED: 1, verdict.PASSED: 2}
    # Not injected in one scenario is not injected; served in one (the
    # others asking nothing) is served.
    worst = min(proofs, key=lambda p: rank[verdict.injected(p)[0]])
    if verdict.injected(worst)[0] == verdict.NOT_INJECTED:
        return worst
    return max(proofs, key=lambda p: rank[verdict.injected(p)[0]])


def _read_proof(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _why(outcome, first, again=None):
    if outcome in (verdict.PASSED, verdict.TRACKER_UNUSED, verdict.LISTED):
        return ""
    if outcome == verdict.NOT_INJECTED:
        return verdict.injected((again or first).proof)[1]
    if outcome in (verdict.FLAKY, verdict.FLAKY_ON_STOCK):
        return f"failed, then passed: {_last_line(first.text)}"
    if outcome == verdict.LISTED_PASSES:
        return "passes with rtagent: remove it from docs/nova.md"
    return _last_line((again or first).text)


def _last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "no failure text")[:240]


def report(mode, outcomes, expected):
    figures = verdict.counts({t: o for t, (o, _) in outcomes.items()}, expected)
    print(f"{mode}: " + " ".join(f"{k}={v}" for k, v in figures.items()))
    for test, (outcome, why) in sorted(outcomes.items()):
        if outcome not in (verdict.PASSED, verdict.TRACKER_UNUSED, verdict.LISTED):
            print(f"  {outcome} {test}: {why}")
    return figures


def check(args):
    st.prepare(args.workdir)
    preflight(args.workdir)
    selected = st.list_ids(args.workdir, args.suites)
    rec = record.load(args.record)
    why = record.mismatch(rec, record.environment_key(args.constraints, selected), selected)
    if why:
        raise CannotJudge(
            f"the recorded baseline is not this environment's ({why}): run make nova-baseline"
        )
    try:
        listed = exceptions.read(args.exceptions)
    except exceptions.ExceptionsError as e:
        raise CannotJudge(str(e)) from None
    ids = selected
    if args.tests:
        unknown = [t for t in args.tests if t not in rec["tests"]]
        if unknown:
            raise CannotJudge(f"not among the selected tests: {unknown[0]}")
        ids = sorted(args.tests)
    expected = record.expected(rec, set(ids))
    # docs/nova.md also lists tests outside CI's selection, for the
    # whole-tree record (make test-nova-full), which checks those.
    in_selection = {t: v for t, v in listed.items() if re.search(args.suites, t)}
    stale = [] if args.tests else verdict.stale_exceptions(in_selection, record.expected(rec))
    flaky = record.flaky_on_stock(rec)
    judge = Judge(args.workdir, listed, flaky, args.concurrency)
    # Each test runs once with rtagent: the RPC class over oslo.messaging,
    # every other test in process. The RPC class's tests run in process too
    # in its two subclasses (nested provider trees), which are selected.
    rpc_ids = sorted(t for t in expected if args.rpc_suite and re.search(args.rpc_suite, t))
    outcomes, rpc_figures = {}, ""
    inprocess_ids = sorted(set(expected) - set(rpc_ids))
    if inprocess_ids:
        inprocess_expected = {t: expected[t] for t in inprocess_ids}
        outcomes.update(judge("inprocess", inprocess_ids, inprocess_expected))
        report("inprocess", outcomes, inprocess_expected)
    if rpc_ids:
        rpc_expected = {t: expected[t] for t in rpc_ids}
        rpc = judge("rpc", rpc_ids, rpc_expected)
        rpc_counts = report("rpc", rpc, rpc_expected)
        outcomes.update(rpc)
        rpc_figures = " " + " ".join(
            f"rpc_{k[len('nova_') :]}={rpc_counts[k]}"
            for k in (
                "nova_baseline_passed",
                "nova_with_rtagent_passed",
                "nova_with_rtagent_failed",
            )
        )
    figures = verdict.counts({t: o for t, (o, _) in outcomes.items()}, expected)
    bad = [o for o, _ in outcomes.values() if o not in verdict.GOOD]
    for test in stale:
        print(
            f"  stale_exception {test}: listed in docs/nova.md, "
            "not a test the baseline expects to pass"
        )
    # A run that judged no test proves nothing.
    ok = not bad and not stale and bool(outcomes)
    print(
        "summary "
        + " ".join(f"{k}={v}" for k, v in figures.items())
        + rpc_figures
        + f" stale_exceptions={len(stale)} {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


def record_baseline(args):
    """Run the selection on stock nova and write the record."""
    st.prepare(args.workdir)
    selected = st.list_ids(args.workdir, args.suites)
    key = record.environment_key(args.constraints, selected)
    try:
        previous = record.load(args.record)
    except record.RecordError:
        previous = None
    print(f"baseline: {len(selected)} tests on stock nova {key['nova']}", flush=True)
    runner = st.Runner(args.workdir, environment(), "baseline", 330.0)
    # The tests are shared out by the previous record's times, if any.
    seconds = {t: e.get("seconds", 0.0) for t, e in (previous or {}).get("tests", {}).items()}
    found = runner.run(selected, args.concurrency, 4 * 3600, seconds)
    failed = [t for t, r in found.items() if r.status in ("fail", "hung", "not run")]
    tests = {t: {"status": r.status, "seconds": round(r.seconds, 1)} for t, r in found.items()}
    if failed:
        print(f"baseline: {len(failed)} tests run again, one at a time", flush=True)
        again = st.Runner(args.workdir, environment(), "baseline-again", 330.0).run(failed, 1, 3600)
        for test, result in again.items():
            if result.status == "success":
                tests[test] = {"status": "flaky", "seconds": round(result.seconds, 1)}
    record.write(args.record, key, args.suites, tests, previous)
    statuses = [entry["status"] for entry in tests.values()]
    passed = sum(s in record.EXPECTED for s in statuses)
    print(
        f"summary nova_baseline_selected={len(tests)} nova_baseline_passed={passed} "
        f"nova_baseline_flaky={statuses.count('flaky')} "
        f"written={os.path.relpath(args.record, TOP)}"
    )
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="check", choices=("check", "record"))
    parser.add_argument("--workdir", default=os.path.join(TOP, ".nova-tests"))
    parser.add_argument("--suites", default=SUITES, help="regex of test ids")
    parser.add_argument("--rpc-suite", default=RPC_SUITE, help="regex; '' to skip")
    parser.add_argument("--tests", nargs="+", help="check only these selected test ids")
    parser.add_argument("--exceptions", default=DOC, help="the document listing the exceptions")
    parser.add_argument("--record", default=RECORD, help="the recorded baseline")
    parser.add_argument("--constraints", default=CONSTRAINTS, help="pins of .venv-nova")
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        return check(args) if args.command == "check" else record_baseline(args)
    except (CannotJudge, record.RecordError) as e:
        print(f"nova_tests: {e}")
        return 2


def _exit_on(signum, _frame):
    # SystemExit unwinds the runs, whose clean-up kills their workers (each
    # in a session of its own, which a signal to this process misses).
    sys.exit(128 + signum)


if __name__ == "__main__":
    # A background job's SIGINT is ignored by default: handled here too.
    for _signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(_signum, _exit_on)
    sys.exit(main())
