"""A hostile state directory through the ``rtagent`` command, as root: a
directory another user owns or can write, links planted under the names
the agent uses, a FIFO that would block a read. Each start is refused with
one line naming the path and the fix, exit status 2, and a planted link's
target is never written, truncated or chmod-ed."""

import os
import subprocess

import pytest

from tests.functional.test_cli import RTAGENT, write_conf

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root"),
]

NOBODY = 65534


def rtagent(*args, timeout=120):
    """The command; a start that never ends (the base of these tests) is
    killed at ``timeout`` and reported as such. Only a hang guard: a
    command takes 1 to 3 s idle, and took 20 to 31 s while two test runs
    and benchmarks loaded the machine."""
    try:
        return subprocess.run(
            [RTAGENT, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-300:]
        pytest.fail(f"rtagent {' '.join(args)} still running after {timeout}s: ...{tail!r}")


def refusal(result):
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtagent: error: ") and "Traceback" not in result.stderr
    return lines[0]


def state_dir(tmp_path, mode=0o700):
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, mode)
    return state


@pytest.mark.parametrize("command", ["audit", "run"])
def test_a_state_dir_owned_by_another_user_is_refused(tmp_path, command):
    state = state_dir(tmp_path)
    os.chown(state, NOBODY, NOBODY)
    line = refusal(rtagent("--config-file", str(write_conf(tmp_path)), command))
    assert f"{state}: is owned by uid {NOBODY}" in line
    assert f"chown root {state}" in line
    assert os.listdir(state) == []


def test_a_group_writable_state_dir_is_refused(tmp_path):
    state = state_dir(tmp_path, 0o770)
    line = refusal(rtagent("--config-file", str(write_conf(tmp_path)), "audit"))
    assert f"{state}: is group-writable" in line and f"chmod go-w {state}" in line
    assert os.listdir(state) == []


@pytest.mark.parametrize("name", ["rtagent.lock", "compute_id.tmp", "rtagent.sqlite"])
def test_a_planted_link_is_refused_and_its_target_untouched(tmp_path, name):
    state = state_dir(tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"")  # empty: SQLite would happily make it a database
    os.chmod(victim, 0o644)
    before = os.stat(victim)
    os.symlink(victim, state / name)
    result = rtagent("--config-file", str(write_conf(tmp_path)), "audit")
    after = os.stat(victim)
    assert (after.st_size, after.st_mode, after.st_mtime_ns) == (
        before.st_size,
        before.st_mode,
        before.st_mtime_ns,
    ), "the planted link's target was changed"
    line = refusal(result)
    assert f"{state / name}: is a symbolic link" in line and "remove it" in line
    assert os.path.islink(state / name)


def test_a_fifo_as_the_identity_file_is_refused_not_waited_on(tmp_path):
    state = state_dir(tmp_path)
    os.mkfifo(state / "compute_id")
    line = refusal(rtagent("--config-file", str(write_conf(tmp_path)), "audit"))
    assert f"{state / 'compute_id'}: is a FIFO, not a regular file" in line
