"""A real guest whose disk is an RBD image (issue 52; ``make test-hypervisor``).

One host of the test cloud on the private libvirtd (tests/hypervisor), nova's
``LibvirtDriver`` with ``[libvirt] images_type = rbd`` on a private
single-node Ceph cluster (rtagent.testing.ceph), and ``rtagent run`` with the
same pool. A server booted through nova's REST API: nova imports the glance
stand-in's raw image into the pool as ``<uuid>_disk`` (the stand-in has no
RBD location, so nova's clone is refused and it downloads and imports, as it
does for any glance not on RBD), and QEMU opens it with its rbd block driver
(Debian's qemu-block-extra). Then: the domain runs with its disk in the
pool, the agent's audit counts that image as the instance's, the server's
DISK_GB is on the pool's sharing provider, whose total is what ``ceph df``
says, and none is on the root; deleted, the image and the allocation go.

Skipped where Ceph or the hypervisor cannot run here, except on CI.
"""

import time
import xml.etree.ElementTree as ET

import libvirt
import pytest

from rtagent.testing import ceph as cephmod
from rtagent.virt.rbd import cluster
from rtagent.virt.rbd import figures as rbdfigures
from tests.cloud.harness import ACTION_BOUND_S, Cloud
from tests.cloud.services import wait_for
from tests.hypervisor.kvmhost import KvmHost
from tests.requirements import require

HOST = "hv-rbd"
POOL = "vms"
GIB = 1024**3
# The agent audits every 3 s (tests/cloud/hosts.py) and ceph df lags
# writes by a few seconds: the figures agree within this.
AGREE_BOUND_S = 30


class RbdHost(KvmHost):
    """A KVM host whose guests' disks are in ``ceph``'s pool, for nova and
    for the agent alike."""

    def __init__(self, name, control, workdir, ceph):
        self.ceph = ceph  # read by the configuration, written in __init__
        super().__init__(name, control, workdir)

    def _rbd(self):
        return {
            "images_type": "rbd",
            "images_rbd_pool": POOL,
            "images_rbd_ceph_conf": self.ceph.conf_path,
            "rbd_connect_timeout": "5",
        }

    def _agent_sections(self):
        sections = super()._agent_sections()
        sections["libvirt"].update(self._rbd())
        return sections

    def _nova_libvirt_extra(self):
        return self._rbd()


@pytest.fixture(scope="class")
def rbd_cloud(control, figures):
    require(cephmod.missing_requirements() or cluster.missing_bindings(), "Ceph")
    t0 = time.monotonic()
    with cephmod.CephCluster() as ceph:
        ceph.create_pool(POOL)
        figures.append(f"hypervisor: step=ceph_started total_s={time.monotonic() - t0:.1f}")
        cloud = Cloud(control, [RbdHost(HOST, control, control.workdir, ceph)], figures)
        try:
            cloud.hosts[HOST].start_on_rtagent()
            cloud.wait_hosts_ready("rbd_host_start")
            yield cloud, ceph
        finally:
            cloud.retire()


def pool_figures(ceph):
    df = ceph.df()
    stats = next(p["stats"] for p in df["pools"] if p["name"] == POOL)
    return stats, df["stats"]["total_bytes"]


def images(ceph):
    return set(ceph.cli("ls", POOL, binary="rbd").split())


def disk_sources(uri, server):
    conn = libvirt.openReadOnly(uri)
    try:
        dom = conn.lookupByUUIDString(server)
        running = dom.state()[0] == libvirt.VIR_DOMAIN_RUNNING
        root = ET.fromstring(dom.XMLDesc(0))
    finally:
        conn.close()
    sources = [
        (s.get("protocol"), s.get("name"))
        for s in root.findall("./devices/disk/source")
        if s.get("protocol")
    ]
    return running, sources


def test_a_guest_on_an_rbd_image(rbd_cloud, figures):
    cloud, ceph = rbd_cloud
    host = cloud.hosts[HOST]
    root = cloud.providers[HOST]
    provider = rbdfigures.provider_uuid(ceph.fsid, POOL)
    flavor_id = cloud.nova.create_flavor("hv.rbd", 1, 128, 1)

    t0 = time.monotonic()
    (server,) = cloud.nova.boot("on-rbd", flavor_id)
    cloud.nova.wait_server(server, "ACTIVE", ACTION_BOUND_S)
    boot_s = time.monotonic() - t0

    # QEMU runs the guest from the image nova imported into the pool.
    running, sources = disk_sources(host.libvirtd.ro_uri, server)
    assert running and sources == [("rbd", f"{POOL}/{server}_disk")], sources
    assert f"{server}_disk" in images(ceph)

    allocations = cloud.placement.consumer(server)
    assert allocations[provider] == {"DISK_GB": 1}, allocations
    assert "DISK_GB" not in allocations[root], allocations
    assert "DISK_GB" not in cloud.placement.inventories(root)

    def agreed():
        node = (host.status() or {}).get("nodes", [{}])[0]
        pool_status = node.get("disk_pool") or {}
        stats, _ = pool_figures(ceph)
        total = cloud.placement.inventories(provider).get("DISK_GB", {}).get("total")
        want = (stats["stored"] + stats["max_avail"]) // GIB
        return (
            pool_status.get("instance_disks_here") == 1
            and total == want
            and (
                pool_status,
                stats,
                total,
            )
        )

    found = wait_for(agreed, "the agent's pool figures and ceph df", AGREE_BOUND_S, [host.agent])
    pool_status, stats, total = found
    assert pool_status["instance_disks_elsewhere"] == 0 and not pool_status["stale"], pool_status
    assert cloud.placement.usages(provider)["DISK_GB"] == 1
    figures.append(
        f"hypervisor: step=rbd_guest boot_s={boot_s:.1f} stored={stats['stored']} "
        f"max_avail={stats['max_avail']} pool_disk_gb={total} "
        f"used_gb={pool_status['used_gb']} instance_disks_here=1"
    )

    cloud.nova.delete(server)
    cloud.nova.wait_gone(server, ACTION_BOUND_S)
    assert f"{server}_disk" not in images(ceph)
    assert not cloud.placement.consumer(server)
    wait_for(
        lambda: cloud.placement.usages(provider).get("DISK_GB") == 0,
        "the pool's usage released",
        AGREE_BOUND_S,
        [host.agent],
    )
