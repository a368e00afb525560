"""benchmarks/claims.py can catch what it exists for: each negative control
must end the run in MISS (exit non-zero), on the gate it puts a bug under.

- ``--hold-lock-across-sync`` (the tracker's lock held across the Placement
  sync): claims wait behind the audit;
- ``--sum-every-claim`` (each claim sums every instance of the node): the
  claim's CPU time at the largest N against the smallest.

Real runs, small: few claims, three audits, 40 interleaved rounds, against
real Placement processes (behind the benchmark's 200 ms delay proxy for the
phases). They check the benchmark's verdicts, not a speed: each control
moves its gate far past the target (claims wait 200-800 ms against 50; summing 300
instances per claim doubles the claim's CPU against a target of 1.5x).
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.functional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "claims.py")
SMALL = ["--claims", "5", "--audits", "3", "--reps", "40"]


def run(*args):
    done = subprocess.run(
        [sys.executable, SCRIPT, *SMALL, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    assert lines[-1].startswith("summary "), done.stdout + done.stderr[-2000:]
    return done, lines


def gate(lines, name):
    """The verdict printed on the gate's own line."""
    (line,) = [x for x in lines if x.startswith(f"{name}=")]
    return line.rsplit("verdict=", 1)[1]


def test_holding_the_lock_across_sync_makes_the_claims_benchmark_miss():
    done, lines = run("--hold-lock-across-sync", "--sizes", "0")
    assert done.returncode != 0, done.stdout
    assert lines[-1].endswith(" MISS"), done.stdout
    # It missed for the reason it exists: claims waited behind the audit.
    assert "longest_audit_lock_holder=sync_negative_control" in done.stdout, done.stdout


def test_summing_every_instance_per_claim_makes_the_scaling_gates_miss():
    done, lines = run("--sum-every-claim", "--sizes", "0,300")
    assert done.returncode != 0, done.stdout
    assert lines[-1].endswith(" MISS"), done.stdout
    assert gate(lines, "claim_cpu_ratio_n300_vs_n0") == "MISS", done.stdout
    assert gate(lines, "lock_hold_cpu_ratio_n300_vs_n0") == "MISS", done.stdout
    # The claim against the commit is judged; with NUMA and PCI on it is
    # printed, not judged.
    assert gate(lines, "p50_ratio_vs_commit") in ("PASS", "MISS", "VOID"), done.stdout
    assert any(x.startswith("p50_ratio_vs_commit_numa_pci=") for x in lines), done.stdout
