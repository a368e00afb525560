# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Disk probe: size and use of the filesystem that holds instance disks."""

from rtagent.virt import errors

GIB = 2**30


def disk_gb(st):
    """Return ``(local_gb, local_gb_used)`` from a statvfs result.

    The size rounds down and the use rounds up: inventory must never claim
    space the filesystem does not have, and usage must never hide space that
    is taken. Blocks reserved for root (``f_bfree - f_bavail``) count in the
    size, since ``f_blocks`` includes them; DISK_GB reserved is configured
    separately.

    :param st: ``os.statvfs(instances_path)`` (or a value of the same shape).
    :returns: ``(local_gb, local_gb_used)``, integers in GiB.
    :raises rtagent.virt.errors.HostReadError: the counts are inconsistent.
    """
    # Some filesystems leave f_frsize at 0; f_bsize is then the block unit.
    block = st.f_frsize or st.f_bsize
    if block <= 0 or st.f_blocks < 0 or not 0 <= st.f_bfree <= st.f_blocks:
        raise errors.HostReadError(
            what="instances filesystem",
            reason=f"inconsistent statvfs: frsize={st.f_frsize} blocks={st.f_blocks} "
            f"bfree={st.f_bfree}",
        )
    total = block * st.f_blocks
    used = block * (st.f_blocks - st.f_bfree)
    return total // GIB, -(-used // GIB)
