"""make test-nova-full (tools/nova_full.py), run from outside on nova's own
tests: a part restricted to a few ids is run on stock nova and with
rtagent, its record is written stamped with the code it ran, and the
summary reads it back. A part to keep refuses a restricted run, and a test
that is not the part's.

Run by ``make test-nova`` in .venv-nova.
"""

import json
import os
import subprocess
import sys

from tools import nova_tests
from tools.novatests import verdict

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(TOP, "tools", "nova_full.py")
F = "nova.tests.functional."
# A regression test that boots servers (the tracker serves it), and an API
# sample test that stestr lists once and runs as its one scenario (v2_28).
BOOTS = f"{F}regressions.test_bug_1679750.TestLocalDeleteAllocations.test_local_delete_removes_allocations_after_compute_restart"  # noqa: E501
SAMPLE = f"{F}api_sample_tests.test_hypervisors.HypervisorsSampleJson228Tests.test_hypervisors_list"


def tool(*args, timeout=900):
    return subprocess.run(
        [sys.executable, TOOL, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _git(*args):
    return subprocess.run(
        ["git", "-C", TOP, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_small_part_is_recorded_and_the_summary_reads_it(tmp_path):
    out = tmp_path / "out"
    done = tool(
        "run", "--part", "1/1", "--tests", BOOTS, SAMPLE,
        "--out", str(out), "--workdir", str(tmp_path / "work"),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith(" PASS"), done.stdout
    record = json.loads((out / "part-01-of-01.json").read_text())
    assert record["stamp"]["commit"] == _git("rev-parse", "HEAD")
    assert record["stamp"]["rtagent_tree"] == _git("rev-parse", "HEAD:rtagent")
    assert record["stamp"]["nova"] == "34.0.0" and record["restricted"] is True
    assert record["tree"]["tests"] == record["share"]["tests"] > 2000
    tests = record["tests"]
    assert sorted(tests) == sorted([BOOTS, SAMPLE])
    assert tests[BOOTS]["stock"] == "success" and tests[BOOTS]["rtagent"] == verdict.PASSED
    # The sample test ran (as its scenario) on stock and with rtagent.
    assert tests[SAMPLE]["stock"] == "success" and tests[SAMPLE]["stock_seconds"] > 0
    assert tests[SAMPLE]["rtagent"] in (verdict.PASSED, verdict.TRACKER_UNUSED)
    summary = tool("summary", "--dir", str(out), "--parts", "1", timeout=120)
    last = summary.stdout.splitlines()[-1]
    assert "full_recorded=2 full_stock_passed=2 " in last, summary.stdout
    assert "full_unlisted=0 " in last and "full_not_injected=0 " in last, last
    # A part of two tests is not the record of a part: partial, exit 1.
    assert "full_parts_partial=1" in last and summary.returncode == 1, summary.stdout


def test_a_part_to_keep_is_never_restricted(tmp_path):
    done = tool("run", "--part", "1/8", "--tests", BOOTS, "--workdir", str(tmp_path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "nova_full: --tests runs only part of a part: give --out, a directory of your own"
    ]


def test_a_test_of_another_part_is_refused(tmp_path):
    # In 2,000 parts of 2,811 tests, part 1 holds one or two.
    done = tool(
        "run", "--part", "1/2000", "--tests", BOOTS, SAMPLE,
        "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work"),
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("nova_full: not a test of part 1/2000: ")
    assert not (tmp_path / "out").exists()


def _proof(directory, name, **counts):
    (directory / f"{name}.json").write_text(json.dumps(counts))


def test_a_test_with_scenarios_proves_what_its_least_proving_scenario_does(tmp_path):
    served = {"compute_managers": 1, "trackers": 1, "agent_calls": 3, "agent_answers": 3}
    unused = {"compute_managers": 1, "trackers": 1, "agent_calls": 0}
    _proof(tmp_path, "t.T.a(one)", **served)
    _proof(tmp_path, "t.T.a(two)", **unused)
    proof = nova_tests._proof(str(tmp_path), "t.T.a", ("one", "two"))
    assert verdict.injected(proof)[0] == verdict.PASSED
    _proof(tmp_path, "t.T.b(one)", **served)
    _proof(tmp_path, "t.T.b(two)", compute_managers=2, trackers=1, agent_calls=1)
    proof = nova_tests._proof(str(tmp_path), "t.T.b", ("one", "two"))
    assert verdict.injected(proof)[0] == verdict.NOT_INJECTED
    # A scenario without a proof record: nothing proves the test.
    assert nova_tests._proof(str(tmp_path), "t.T.a", ("one", "two", "three")) is None
