"""benchmarks/claims.py can catch the bug it exists for: with the tracker's
lock held across the Placement sync (its ``--hold-lock-across-sync``
negative control) it must say MISS and exit non-zero.

A real run, small: one size (N=0), few claims, three audits, against a
real Placement process behind the benchmark's 200 ms delay proxy. This
checks the benchmark's verdict, not a speed: the control makes claims wait
200-800 ms behind the audit, against a target of 50 ms.
"""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.functional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "claims.py")


def test_holding_the_lock_across_sync_makes_the_claims_benchmark_miss():
    done = subprocess.run(
        [
            sys.executable,
            SCRIPT,
            "--hold-lock-across-sync",
            "--sizes",
            "0",
            "--claims",
            "10",
            "--audits",
            "3",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    assert done.returncode != 0, done.stdout
    assert lines[-1].startswith("summary "), done.stdout
    assert lines[-1].endswith(" MISS"), done.stdout
    # It missed for the reason it exists: claims waited behind the audit.
    assert "longest_audit_lock_holder=sync_negative_control" in done.stdout, done.stdout
