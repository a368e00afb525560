"""A Ceph pool's figures as ``ceph df`` reports them, and what DISK_GB
makes of them. Pure: the parsing and the arithmetic, no cluster.

Units: Ceph reports bytes; Placement counts DISK_GB in whole GiB. A total is
rounded down (never offer a part GiB the pool does not have), a usage up
(never report less in use than there is), as nova rounds a host disk.
"""

import dataclasses
import math
import re
import uuid as uuidlib

GIB = 1024**3

# nova names an instance's disks in the pool "<instance uuid>_<name>":
# "_disk" (the root disk), "_disk.local", "_disk.eph0", "_disk.swap",
# "_disk.config" (nova/virt/libvirt/imagebackend.py, Rbd.__init__).
_INSTANCE_DISK = re.compile(
    r"^(?P<uuid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"_disk(?:\.[A-Za-z0-9_.-]+)?$"
)

# Every agent derives the pool's provider and aggregate UUIDs from the
# cluster's fsid and the pool's name, so hosts that share a pool agree on
# them without talking to each other, and a restart finds the same ones.
_NAMESPACE = uuidlib.UUID("6f1c1a5e-3f43-4f0e-9d53-2b3c1e0a52d1")


class DfFormatError(ValueError):
    """``ceph df`` answered something this module cannot read."""


@dataclasses.dataclass(frozen=True)
class PoolFigures:
    """One pool's figures from one ``ceph df``, in bytes.

    :param fsid: the cluster's fsid.
    :param pool: the pool's name.
    :param stored: user data in the pool (``stats.stored``).
    :param bytes_used: raw space the pool takes, replicas included
        (``stats.bytes_used``).
    :param max_avail: what can still be written to the pool, replication
        taken off (``stats.max_avail``).
    :param cluster_total: every OSD's raw size (``stats.total_bytes``), what
        stock nova reports as each host's DISK_GB total.
    :param images: the names of the RBD images in the pool, sorted.
    """

    fsid: str
    pool: str
    stored: int
    bytes_used: int
    max_avail: int
    cluster_total: int
    images: tuple = ()

    @property
    def capacity_gb(self):
        """DISK_GB the pool offers guests' data: what it stores plus what can
        still be written to it, in whole GiB (floor)."""
        return (self.stored + self.max_avail) // GIB

    @property
    def used_gb(self):
        """GiB of user data in the pool (ceil of ``stored``)."""
        return math.ceil(self.stored / GIB)

    @property
    def nova_total_gb(self):
        """DISK_GB total as stock nova reports it on every host: the
        cluster's raw size in whole GiB (nova's ``int(total / Gi)``)."""
        return self.cluster_total // GIB

    @property
    def nova_used_gb(self):
        """nova's ``local_gb_used``: the pool's raw usage in GiB (ceil)."""
        return math.ceil(self.bytes_used / GIB)

    def instance_disks(self):
        """Instance UUID -> the names of its disks in the pool (nova's
        ``<uuid>_disk`` and its siblings)."""
        found = {}
        for name in self.images:
            uuid = instance_of(name)
            if uuid is not None:
                found.setdefault(uuid, []).append(name)
        return {uuid: tuple(names) for uuid, names in found.items()}

    def other_images(self):
        """Images that are no instance's disk (Glance images, volumes, ...)."""
        return tuple(name for name in self.images if instance_of(name) is None)


def instance_of(image_name):
    """The instance UUID of a disk nova made in the pool, or None."""
    match = _INSTANCE_DISK.match(image_name)
    return match.group("uuid") if match else None


def from_df(df, fsid, pool, images=()):
    """The :class:`PoolFigures` of ``pool`` in a ``ceph df --format json``
    answer (``df``, decoded).

    :raises DfFormatError: the pool is not in it, or a figure is missing.
    """
    try:
        cluster_total = int(df["stats"]["total_bytes"])
        pools = df["pools"]
    except (KeyError, TypeError, ValueError) as exc:
        raise DfFormatError(f"no cluster totals in ceph df: {exc!r}") from exc
    for entry in pools:
        if isinstance(entry, dict) and entry.get("name") == pool:
            stats = entry.get("stats") or {}
            try:
                return PoolFigures(
                    fsid=fsid,
                    pool=pool,
                    stored=int(stats["stored"]),
                    bytes_used=int(stats["bytes_used"]),
                    max_avail=int(stats["max_avail"]),
                    cluster_total=cluster_total,
                    images=tuple(sorted(images)),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise DfFormatError(f"pool {pool!r} lacks a figure in ceph df: {exc!r}") from exc
    raise DfFormatError(f"pool {pool!r} is not in the cluster (ceph df lists {len(pools)} pools)")


def provider_uuid(fsid, pool):
    """The UUID of the pool's sharing provider in Placement."""
    return str(uuidlib.uuid5(_NAMESPACE, f"provider:{fsid}:{pool}"))


def aggregate_uuid(fsid, pool):
    """The UUID of the aggregate that ties the pool's provider to the hosts."""
    return str(uuidlib.uuid5(_NAMESPACE, f"aggregate:{fsid}:{pool}"))


def provider_name(fsid, pool):
    """The pool provider's name: unique per cluster and pool (Placement
    refuses two providers of one name)."""
    return f"ceph_pool:{pool}@{fsid}"
