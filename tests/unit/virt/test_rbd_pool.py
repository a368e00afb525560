"""The pool's figures from ``ceph df`` (pure), the bounded reading that
keeps the last good figures, and the view a driver makes of them. No
cluster: ``ceph df`` answers as captured from the test cluster (Ceph
16.2.15), readings scripted."""

import dataclasses
import threading

import pytest

from rtagent.virt import errors
from rtagent.virt.host import HostView, ProviderFacts
from rtagent.virt.rbd import driver, figures, watch

GIB = 1024**3
# `ceph df --format json` of rtagent.testing.ceph's cluster with pool vms.
DF = {
    "stats": {"total_bytes": 51539607552, "total_avail_bytes": 51531196937},
    "pools": [
        {"name": ".mgr", "id": 1, "stats": {"stored": 0, "bytes_used": 0, "max_avail": 1}},
        {
            "name": "vms",
            "id": 2,
            "stats": {"stored": 8388741, "bytes_used": 8388741, "max_avail": 48954216448},
        },
    ],
}
FSID = "e42c689a-0ab2-4104-a350-f026f1fa4c18"
GUEST = "3f0c6d52-96a4-4f6e-8a3e-2a5e7a3b1c01"
IMAGES = (f"{GUEST}_disk", f"{GUEST}_disk.config", "glance-image", f"{GUEST}_diskette")


def test_figures_and_their_rounding():
    found = figures.from_df(DF, FSID, "vms", IMAGES)
    # (8388741 + 48954216448) / GiB = 45.6: offered floor, used ceil.
    assert found.capacity_gb == 45
    assert found.used_gb == 1
    # Stock nova: the cluster's raw size on every host.
    assert found.nova_total_gb == 48
    assert found.nova_used_gb == 1


def test_nova_disks_are_told_from_other_images():
    found = figures.from_df(DF, FSID, "vms", IMAGES)
    assert found.instance_disks() == {GUEST: (f"{GUEST}_disk", f"{GUEST}_disk.config")}
    assert found.other_images() == (f"{GUEST}_diskette", "glance-image")


@pytest.mark.parametrize(
    "df, message",
    [
        ({"pools": []}, "no cluster totals"),
        (dict(DF, pools=[{"name": "other", "stats": {}}]), "pool 'vms' is not in the cluster"),
        (dict(DF, pools=[{"name": "vms", "stats": {"stored": 1}}]), "lacks a figure"),
    ],
)
def test_an_unreadable_df_is_a_typed_error(df, message):
    with pytest.raises(figures.DfFormatError, match=message):
        figures.from_df(df, FSID, "vms")


def test_every_host_derives_the_same_provider():
    assert figures.provider_uuid(FSID, "vms") == figures.provider_uuid(FSID, "vms")
    assert figures.provider_uuid(FSID, "vms") != figures.provider_uuid(FSID, "images")
    assert figures.provider_uuid(FSID, "vms") != figures.aggregate_uuid(FSID, "vms")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_failed_reading_keeps_the_last_figures_stale_since_the_first_failure():
    clock = Clock()
    answers = [figures.from_df(DF, FSID, "vms"), OSError("connection refused"), RuntimeError("x")]

    def read():
        answer = answers.pop(0) if answers else figures.from_df(DF, FSID, "vms")
        if isinstance(answer, Exception):
            raise answer
        return answer

    pool = watch.PoolWatch(read, timeout=5, wall=clock)
    good = pool.read()
    assert good.stale_since is None and good.read_at == 1000.0
    clock.now = 1060.0
    first = pool.read()
    assert (first.figures, first.read_at) == (good.figures, 1000.0)
    assert (first.stale_since, first.error) == (1060.0, "connection refused")
    clock.now = 1120.0
    second = pool.read()
    assert second.stale_since == 1060.0 and second.error == "x"
    clock.now = 1180.0
    back = pool.read()
    assert back.stale_since is None and back.error is None and back.read_at == 1180.0


def test_a_hung_reading_is_bounded_and_not_doubled():
    release = threading.Event()
    calls = []

    def read():
        calls.append(1)
        release.wait(10)
        return figures.from_df(DF, FSID, "vms")

    pool = watch.PoolWatch(read, timeout=0.05)
    first = pool.read()
    assert first.figures is None and "within 0.05 s" in first.error
    pool.read()
    assert len(calls) == 1, "no second reading while the first hangs"
    release.set()
    for _ in range(100):
        if pool.reading.stale_since is None:
            break
        threading.Event().wait(0.01)
    assert pool.reading.figures is not None, "the late answer is kept"


VIEW = HostView("cmp-a", "QEMU", 8002000, vcpus=4, memory_mb=4096, local_gb=900)


def test_a_view_with_the_shared_pool():
    reading = watch.Reading(figures.from_df(DF, FSID, "vms", IMAGES), read_at=5.0)
    view = driver.with_pool(VIEW, reading, "vms", shared=True)
    assert view.local_gb == 45 and view.disk_available_least == 45
    pool = view.disk_pool
    assert pool.shared and pool.total_gb == 45 and pool.instance_disks == {GUEST}
    assert pool.provider_uuid == figures.provider_uuid(FSID, "vms")
    nova = driver.with_pool(VIEW, reading, "vms", shared=False)
    assert nova.local_gb == 48 and not nova.disk_pool.shared


def test_a_pool_never_read_fails_the_reading():
    with pytest.raises(errors.HostReadError, match=r"RBD pool 'vms'.*refused"):
        driver.with_pool(VIEW, watch.Reading(error="refused"), "vms", shared=True)


def test_the_read_time_alone_changes_no_view():
    found = figures.from_df(DF, FSID, "vms")
    a = driver.with_pool(VIEW, watch.Reading(found, read_at=1.0), "vms", True)
    b = driver.with_pool(VIEW, watch.Reading(found, read_at=2.0), "vms", True)
    assert a == b


def _facts(uuid, parent, records, seeded=None):
    def rows(invs):
        return tuple(sorted((rc, tuple(sorted(rec.items()))) for rc, rec in invs.items()))

    return ProviderFacts(
        uuid=uuid,
        name=uuid,
        parent_uuid=parent,
        inventories=rows(records),
        seeded=rows(seeded) if seeded is not None else None,
    )


def test_the_pool_decides_disk_gb_on_the_root_not_the_inner_driver():
    # nova's libvirt driver on RBD puts the cluster's raw size on the root
    # in update_provider_tree (and is handed the agent's figures): neither
    # reaches the root's DISK_GB; a child's classes are untouched.
    root = "0d6a8c4e-4b0e-4f0f-9a43-5b1f3f0c0a01"
    disk = {"total": 48, "reserved": 0}
    reported = (
        _facts(root, None, {"DISK_GB": disk, "VCPU": {"total": 4}}, seeded={"DISK_GB": disk}),
        _facts("child", root, {"DISK_GB": disk}),
    )
    view = dataclasses.replace(VIEW, node_uuid=root, providers=reported)
    reading = watch.Reading(figures.from_df(DF, FSID, "vms", IMAGES), read_at=5.0)
    for shared in (True, False):
        found = driver.with_pool(view, reading, "vms", shared=shared)
        top, child = found.providers
        assert [rc for rc, _ in top.inventories] == ["VCPU"] and top.seeded == ()
        assert child == reported[1]


class OneNodeDriver:
    """An inner driver that reads one node alone (as nova's does at a claim)."""

    def __init__(self):
        self.calls = []

    def read_nodes(self, **kwargs):
        self.calls.append(("read_nodes", kwargs))
        return [VIEW]

    def read_node(self, nodename):
        self.calls.append(("read_node", nodename))
        return VIEW if nodename == VIEW.hypervisor_hostname else None


def test_a_node_read_alone_takes_the_last_figures_without_reading_the_pool():
    reads = []

    def read():
        reads.append(1)
        return figures.from_df(DF, FSID, "vms", IMAGES)

    inner = OneNodeDriver()
    pool = driver.RbdPoolDriver(inner, watch.PoolWatch(read, timeout=5), "vms")
    with pytest.raises(errors.HostReadError, match="not read yet"):
        pool.read_node("cmp-a")  # before the first audit: no figures
    assert reads == []
    assert pool.read_nodes(providers=False)[0].local_gb == 45
    assert inner.calls[-1] == ("read_nodes", {"providers": False})
    assert len(reads) == 1
    view = pool.read_node("cmp-a")
    assert view.local_gb == 45 and view.disk_pool.shared and len(reads) == 1
    assert pool.read_node("gone") is None


def test_the_figures_handed_to_an_inner_driver_are_computed_with_the_pool():
    # nova's driver is handed the agent's figures of the root: with the
    # pool shared, the agent's view has the pool's disk, not the inner's.
    bound = {}

    class Binding(OneNodeDriver):
        def bind(self, seed, allocations):
            bound.update(seed=seed, allocations=allocations)

    def read():
        return figures.from_df(DF, FSID, "vms", IMAGES)

    pool = driver.RbdPoolDriver(Binding(), watch.PoolWatch(read, timeout=5), "vms")
    seen = []
    pool.bind(seed=seen.append, allocations="allocations")
    pool.read_nodes()
    bound["seed"](VIEW)
    assert bound["allocations"] == "allocations"
    assert VIEW.local_gb == 900 and seen[0].local_gb == 45 and seen[0].disk_pool.shared
