"""Two test runs on one machine take turns with the one real libvirtd.

Two ``make test`` side by side (issue 35): the second run's real-libvirtd
tests found the first run's daemon holding the QEMU driver and errored,
all twelve. A start now takes a machine-wide lock first and waits for it.
"""

import os
import select
import subprocess
import sys
import textwrap

import libvirt
import pytest

from rtagent.testing import libvirtd as private

HOLD = textwrap.dedent(
    """
    import sys, time
    from rtagent.testing.libvirtd import take_machine_lock
    take_machine_lock(sys.argv[1])
    print("held", flush=True)
    if len(sys.argv) > 2:
        time.sleep(float(sys.argv[2]))
        print("letting go", flush=True)
    else:
        sys.stdin.read()
    """
)


def hold(path, seconds=None):
    """Another process holding the lock at ``path`` (for ``seconds``, or
    until its stdin closes)."""
    extra = [] if seconds is None else [str(seconds)]
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, path, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holder(tmp_path):
    path = str(tmp_path / "machine.lock")
    proc = hold(path)
    try:
        yield path, proc
    finally:
        if proc.poll() is None:
            proc.communicate("")


def test_a_second_start_waits_until_the_first_lets_go(tmp_path):
    path = str(tmp_path / "machine.lock")
    proc = hold(path, seconds=1)
    try:
        fd = private.take_machine_lock(path, wait_s=120)
        try:
            # The lock came only once its holder had let go: what it
            # printed just before is there to read, without waiting.
            assert select.select([proc.stdout], [], [], 0)[0]
            assert proc.stdout.readline().strip() == "letting go"
            with open(path) as f:
                assert f.read().strip() == str(os.getpid())
        finally:
            os.close(fd)
    finally:
        proc.communicate("")


def test_a_lock_held_past_the_wait_names_its_holder(holder):
    path, proc = holder
    with pytest.raises(private.LibvirtdError, match=f"the process {proc.pid}\\) held"):
        private.take_machine_lock(path, wait_s=0.5)
    assert proc.poll() is None


def test_a_second_daemon_waits_its_turn_and_leaves_the_first_alone(libvirtd):
    second = private.Libvirtd(machine_wait_s=1)
    with pytest.raises(private.LibvirtdError, match="another test run's libvirtd"):
        second.start()
    assert second.libvirtd is None and second.virtlogd is None
    assert not os.path.exists(second.dir)
    conn = libvirt.open(libvirtd.uri)
    try:
        assert conn.getCapabilities()
    finally:
        conn.close()
