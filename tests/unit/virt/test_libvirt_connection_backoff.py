"""libvirt's reconnection backoff (rtagent.virt.libvirt.connection): a
failed open is tried again only after backoff_min seconds, doubling up to
backoff_max, with a real libvirt open that fails (the test driver and a
host file that does not exist)."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt.connection import Connection


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_failed_open_is_tried_again_after_a_doubling_pause(tmp_path):
    clock = Clock()
    conn = Connection(
        f"test://{tmp_path}/no-such-host.xml", clock=clock, backoff_min=2.0, backoff_max=20.0
    )
    pauses = []
    for _ in range(6):
        with pytest.raises(errors.HypervisorUnavailable):
            conn.get()
        pauses.append(conn.retry_in)
        # Before the pause is over, no open is tried: the same failure.
        clock.now += conn.retry_in - 0.5
        with pytest.raises(errors.HypervisorUnavailable, match=r"next attempt in 0\.5 s"):
            conn.get()
        clock.now += 0.5
    assert pauses == [2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    assert conn.failures == 6
    assert conn.available is False
