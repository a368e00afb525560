# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Disk probe: size and use of the filesystem that holds instance disks."""

import os.path

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


def overcommitted_bytes(domains, instances_path):
    """Bytes the local disks under ``instances_path`` may still grow by
    (virtual size less the space taken now, summed over ``domains``)."""
    return sum(
        max(0, capacity - physical)
        for dom in domains
        for path, capacity, physical in dom.local_disks
        if is_under(path, instances_path)
    )


def available_least_gb(st, domains, instances_path, over=None):
    """nova's ``disk_available_least``: free GiB once local disks are full size.

    nova: ``floor(free bytes / GiB) * GiB - over-committed bytes``, over GiB,
    where a disk's over-commitment is its virtual size minus the space it
    takes now (qcow2 files; 0 for raw). We take both sizes from the one bulk
    ``getAllDomainStats`` call (``block.N.capacity`` and ``block.N.physical``)
    instead of ``qemu-img info`` per disk, and count only disks whose path is
    under ``instances_path``: volumes (iSCSI, RBD, ...) live elsewhere.
    ``physical`` is the file's size, where nova uses its allocated blocks;
    for sparse qcow2 files the two agree to within a cluster.

    :param st: ``os.statvfs(instances_path)``.
    :param domains: ``DomainInfo`` values with ``local_disks``.
    :param instances_path: the instances directory.
    :param over: :func:`overcommitted_bytes` of ``domains``, if known.
    :returns: GiB (int, floor; negative when over-committed beyond free).
    """
    block = st.f_frsize or st.f_bsize
    free_gb = block * st.f_bavail // GIB
    if over is None:
        over = overcommitted_bytes(domains, instances_path)
    return (free_gb * GIB - over) // GIB


def is_under(path, directory):
    """Tell whether ``path`` is inside ``directory`` (lexically)."""
    directory = os.path.normpath(directory)
    path = os.path.normpath(path)
    return path.startswith(directory.rstrip("/") + "/")
