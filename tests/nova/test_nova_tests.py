"""make test-nova cannot pass without rtagent (tools/nova_tests.py, run from
outside as CI runs it, on nova's own tests):

- in a nova environment without rtagent's test hook, or without rtagent at
  all, a run stops at once with one line and exit status 2;
- a one-time failure injected into rtagent's claim path makes the run fail
  as ``flaky_with_rtagent``: the rerun does not absorb it;
- a listed test that fails otherwise than its docs/nova.md signature says
  fails the run, and the same test with its true signature passes it;
- each selected test runs once: the RPC class over RPC only, the others in
  process.

Run by ``make test-nova`` in .venv-nova.
"""

import os
import re
import subprocess
import sys
import sysconfig
import time

import pytest

from tools.novatests import exceptions, record, stestr

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(TOP, "tools", "nova_tests.py")
RECORD = os.path.join(TOP, "tools", "nova-baseline.json")
DOC = os.path.join(TOP, "docs", "nova.md")
HOOK = "rtagent_nova_testhook.pth"
# A short test that boots a server, so it goes through instance_claim.
BOOTS = (
    "nova.tests.functional.libvirt.test_numa_servers."
    "NUMAServersTest.test_create_server_with_numa_topology"
)


def nova_tool(*args, python=sys.executable, env=None, workdir):
    return subprocess.run(
        [python, TOOL, "--workdir", str(workdir), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
        timeout=900,
        check=False,
    )


def nova_env_without(tmp_path, *left_out):
    """A python whose site-packages are .venv-nova's minus ``left_out``
    (file names): the same packages and .pth files, as if those files had
    been deleted from it."""
    site = sysconfig.get_paths()["purelib"]
    mirror = tmp_path / "site"
    mirror.mkdir()
    for name in os.listdir(site):
        if not any(re.fullmatch(pattern, name) for pattern in left_out):
            os.symlink(os.path.join(site, name), mirror / name)
    venv = tmp_path / "venv"
    subprocess.run(
        [sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    own = stestr.purelib(str(venv / "bin" / "python"))
    with open(os.path.join(own, "nova_site.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({str(mirror)!r})\n")
    return str(venv / "bin" / "python")


@pytest.mark.parametrize(
    "left_out, says",
    [
        ((re.escape(HOOK),), "rtagent's test hook is not installed in nova's environment"),
        (
            (re.escape(HOOK), r"__editable__.*rtagent.*"),
            "rtagent cannot be imported in nova's environment",
        ),
    ],
    ids=["hook-removed", "rtagent-unimportable"],
)
def test_without_rtagent_in_nova_s_tests_a_run_stops_with_one_line(tmp_path, left_out, says):
    python = nova_env_without(tmp_path, *left_out)
    done = nova_tool("--tests", BOOTS, python=python, workdir=tmp_path / "work")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nova_tests: ") and says in lines[0], lines


def _fastest_of(regex):
    expected = record.expected(record.load(RECORD))
    return min((t for t in expected if re.search(regex, t)), key=lambda t: expected[t]["seconds"])


def test_the_full_environment_passes_the_same_test_once(tmp_path):
    # The control of the test above: with the hook, rtagent serves the test
    # and its proof record says so. Each selected test runs once: a test of
    # the RPC class over RPC only, any other in process only.
    rpc_test = _fastest_of(r"\.test_servers\.ServerMovingTests\.")
    done = nova_tool("--tests", BOOTS, rpc_test, workdir=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "inprocess: 1 tests" in done.stdout and "rpc: 1 tests" in done.stdout, done.stdout
    summary = done.stdout.splitlines()[-1]
    assert summary.endswith(" PASS"), summary
    assert "nova_baseline_passed=2 " in summary and "rpc_baseline_passed=1 " in summary, summary
    assert "nova_with_rtagent_passed=2 " in summary and "nova_not_injected=0 " in summary, summary
    assert sorted(os.listdir(tmp_path / "proof-inprocess")) == [f"{BOOTS}.json"]
    assert sorted(os.listdir(tmp_path / "proof-rpc")) == [f"{rpc_test}.json"]
    proof = (tmp_path / "proof-inprocess" / f"{BOOTS}.json").read_text()
    assert '"agent_answers": ' in proof and '"compute_managers": 0' not in proof


def test_a_one_time_failure_in_rtagent_s_claim_path_fails_the_run(tmp_path):
    marker = tmp_path / "fault-done"
    done = nova_tool(
        "--tests", BOOTS, workdir=tmp_path, env={"RTAGENT_NOVA_FAULT_ONCE": str(marker)}
    )
    assert marker.exists(), "the fault was never reached: the test made no instance claim"
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"flaky_with_rtagent {BOOTS}: failed, then passed" in done.stdout
    assert "nova_flaky_with_rtagent=1 " in done.stdout and done.stdout.rstrip().endswith("FAIL")


def _fastest_listed():
    rec = record.load(RECORD)
    listed = exceptions.read(DOC)
    expected = record.expected(rec)
    return min((t for t in listed if t in expected), key=lambda t: expected[t]["seconds"])


def _doc_with_signature(tmp_path, test, signature):
    out = tmp_path / "nova.md"
    with open(DOC) as f, open(out, "w") as g:
        for line in f:
            cells = line.split(" | ")
            if line.startswith(f"| `{test}` |"):
                cells[1] = f"`{signature}`"
            g.write(" | ".join(cells))
    return str(out)


def test_a_listed_test_failing_otherwise_fails_the_run(tmp_path):
    test = _fastest_listed()
    doc = _doc_with_signature(tmp_path, test, "SignatureNoFailureHas")
    done = nova_tool("--tests", test, "--exceptions", doc, workdir=tmp_path / "other")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"listed_but_failed_otherwise {test}" in done.stdout
    done = nova_tool("--tests", test, workdir=tmp_path / "own")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nova_listed_exceptions=1 " in done.stdout


def _group_members(pgid):
    """The live processes of group ``pgid``. A zombie has exited: killed
    with its group, a worker's children are handed to init, which reaps
    them when it gets to it (here up to 2 s later under load)."""
    members = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(pid))
    return members


def test_a_stopped_run_leaves_no_worker_behind(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, TOOL, "--workdir", str(tmp_path), "--rpc-suite", "", "--tests", BOOTS],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    load_list = str(tmp_path / "inprocess-0" / "run.list")
    worker = None
    deadline = time.monotonic() + 300
    while worker is None and time.monotonic() < deadline and proc.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if load_list.encode() in f.read():
                        worker = int(pid)
            except OSError:
                continue
        time.sleep(0.2)
    assert worker is not None, "no worker started"
    try:
        # The worker is its own process group (a session of its own).
        assert _group_members(worker)
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 128 + 15, out
        assert _group_members(worker) == [], "the run's worker outlived it"
    finally:
        for pid in _group_members(worker):
            os.kill(pid, 9)
