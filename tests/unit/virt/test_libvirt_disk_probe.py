"""Disk probe over canned statvfs results."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtagent.virt import errors
from rtagent.virt.libvirt.probes import disk

GIB = 2**30


def statvfs(frsize, blocks, bfree, bsize=4096):
    # (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)
    return os.statvfs_result((bsize, frsize, blocks, bfree, bfree, 0, 0, 0, 0, 255))


@pytest.mark.parametrize(
    ("st", "expected"),
    [
        # 100 GiB, half used.
        (statvfs(4096, 100 * GIB // 4096, 50 * GIB // 4096), (100, 50)),
        # Size rounds down, use rounds up: 100 GiB + one block, one block used.
        (statvfs(4096, 100 * GIB // 4096 + 1, 100 * GIB // 4096), (100, 1)),
        # Nothing used.
        (statvfs(4096, 10 * GIB // 4096, 10 * GIB // 4096), (10, 0)),
        # Smaller than a GiB.
        (statvfs(512, 1000, 10), (0, 1)),
        # f_frsize 0: f_bsize is the unit.
        (statvfs(0, 2 * GIB // 1024, GIB // 1024, bsize=1024), (2, 1)),
        # An empty filesystem.
        (statvfs(4096, 0, 0), (0, 0)),
    ],
)
def test_disk_gb(st, expected):
    assert disk.disk_gb(st) == expected


@pytest.mark.parametrize(
    "st",
    [
        statvfs(4096, 10, 11),
        statvfs(4096, 10, -1),
        statvfs(0, 10, 5, bsize=0),
    ],
)
def test_inconsistent_counts_raise(st):
    with pytest.raises(errors.HostReadError):
        disk.disk_gb(st)


@given(
    frsize=st.sampled_from([512, 1024, 4096, 65536]),
    blocks=st.integers(min_value=0, max_value=2**40),
    free_fraction=st.floats(min_value=0, max_value=1),
)
def test_size_never_over_and_use_never_under(frsize, blocks, free_fraction):
    bfree = int(blocks * free_fraction)
    local_gb, used_gb = disk.disk_gb(statvfs(frsize, blocks, bfree))
    total, used = frsize * blocks, frsize * (blocks - bfree)
    assert local_gb * GIB <= total < (local_gb + 1) * GIB
    assert (used_gb - 1) * GIB < used <= used_gb * GIB
