# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The agent embedded in nova-compute on a host whose guests' disks are in
a real Ceph pool (issue 52): with nova.conf's ``[libvirt] images_type =
rbd`` and ``images_rbd_disk_on_each_root = false``, the agent reads the
pool and publishes its DISK_GB once, on the pool's sharing provider, as the
daemon does; by default there, nova's layout: the root keeps nova's
driver's reading, as stock nova publishes it (docs/rbd.md).

nova's libvirt functional harness (fake libvirt host; real API, scheduler,
conductor and Placement) with nova's real ``LibvirtDriver``, whose RBD
figures are left unmocked: its ``get_available_resource`` and
``update_provider_tree`` run ``ceph df`` against a private single-node
cluster (rtagent.testing.ceph), so nova's driver puts the cluster's raw
size on the root as stock nova does, and the test checks that this figure
does not reach Placement. nova's fake drivers know nothing of
``images_type``: with them the driver's side of the disk would be made up.

Run by ``make test-nova`` in .venv-nova; skipped where Ceph cannot run
here, except on CI (tests/requirements.py).
"""

import fixtures
import pytest
from nova.tests.functional.libvirt import base
from nova.virt.libvirt import driver as nova_libvirt

from rtagent.conf.validation import ConfigError
from rtagent.nova import inprocess
from rtagent.testing import ceph as cephmod
from rtagent.virt.rbd import cluster, figures
from tests.nova.harness import KeepsTestMethod, PatientWaits, take_over
from tests.requirements import require

POOL = "vms"
GIB = 1024**3
# nova's harness mocks the driver's disk reading (128 GiB); the real one
# reads the pool through `ceph df`, as on a host.
_REAL_LOCAL_GB_INFO = nova_libvirt.LibvirtDriver.__dict__["_get_local_gb_info"]


@pytest.fixture(scope="class")
def ceph_cluster(request):
    require(cephmod.missing_requirements() or cluster.missing_bindings(), "Ceph")
    with cephmod.CephCluster() as c:
        c.create_pool(POOL)
        request.cls.ceph = c
        yield c


@pytest.mark.usefixtures("ceph_cluster")
class EmbeddedAgentOnRbd(KeepsTestMethod, PatientWaits, base.ServersTestBase):
    ceph = None  # set by the class's fixture

    def setUp(self):
        super().setUp()
        self.useFixture(
            fixtures.MockPatch(
                "nova.virt.libvirt.LibvirtDriver._get_local_gb_info", new=_REAL_LOCAL_GB_INFO
            )
        )
        self.flags(
            images_type="rbd",
            images_rbd_pool=POOL,
            images_rbd_ceph_conf=self.ceph.conf_path,
            rbd_connect_timeout=5,
            group="libvirt",
        )
        # rtagent's option, read from nova.conf's [libvirt] (inprocess
        # registers it there).
        inprocess.register_nova_opts(nova_conf())

    def test_disk_gb_is_the_pools_once_on_the_sharing_provider(self):
        self.flags(images_rbd_disk_on_each_root=False, group="libvirt")
        # Started on stock nova first (its tracker publishes the driver's
        # figures), then taken over by the embedded agent, as an operator
        # adopts a host: nova's DISK_GB on the root is moved off it.
        self.start_compute(hostname="compute1")
        root = self.compute_rp_uuids["compute1"]
        nova_total = self._get_provider_inventory(root)["DISK_GB"]["total"]
        driver = self.computes["compute1"].driver
        nova_reading = driver.get_available_resource("compute1")["local_gb"]
        take_over(self, "compute1")

        df = self.ceph.df()
        stats = next(p["stats"] for p in df["pools"] if p["name"] == POOL)
        pool_gb = (stats["stored"] + stats["max_avail"]) // GIB
        pool = figures.provider_uuid(self.ceph.fsid, POOL)
        # nova's driver read the cluster's raw size, stock nova's figure.
        self.assertEqual(df["stats"]["total_bytes"] // GIB, nova_reading)
        self.assertEqual(nova_reading, nova_total)
        print(
            f"\nceph df: stored {stats['stored']}, max_avail {stats['max_avail']}, "
            f"total_bytes {df['stats']['total_bytes']}; DISK_GB on the pool's provider "
            f"{pool_gb}; nova's driver's figure {nova_reading} (stock nova's, on the root)"
        )

        self.assertNotIn("DISK_GB", self._get_provider_inventory(root))
        inventory = self._get_provider_inventory(pool)["DISK_GB"]
        self.assertEqual((pool_gb, pool_gb, 0), (inventory["total"], inventory["max_unit"], 0))
        self.assertIn("MISC_SHARES_VIA_AGGREGATE", self._get_provider_traits(pool))
        aggregate = figures.aggregate_uuid(self.ceph.fsid, POOL)
        self.assertEqual([aggregate], self._get_provider_aggregates(pool))
        self.assertIn(aggregate, self._get_provider_aggregates(root))

        # A guest's disks (root 7 and ephemeral 3: both in the pool with
        # images_type = rbd) come from the pool, its CPUs and memory from
        # the root; nova's next periodic changes none of it.
        flavor = self._create_flavor(vcpu=1, memory_mb=512, disk=7, ephemeral=3)
        server = self._create_server(flavor_id=flavor)
        allocations = self._get_allocations_by_server_uuid(server["id"])
        self.assertEqual({"DISK_GB": 10}, allocations[pool]["resources"])
        self.assertNotIn("DISK_GB", allocations[root]["resources"])
        self._run_periodics(raise_on_error=True)
        self.assertNotIn("DISK_GB", self._get_provider_inventory(root))
        self.assertEqual(10, self._get_provider_usages(pool)["DISK_GB"])

        self._delete_server(server)
        self.assertEqual(0, self._get_provider_usages(pool)["DISK_GB"])

    def test_novas_layout_is_the_default_and_nova_drivers_reading(self):
        # nova.conf without rtagent's option: stock nova's layout. The root
        # keeps the cluster's raw size as nova's driver reads it (nova's
        # RBDDriver, ``ceph df``); the agent reads nothing of the pool, so
        # an upgraded nova-compute moves nothing off its root.
        self.start_compute(hostname="compute1")
        fixture = take_over(self, "compute1")
        root = self.compute_rp_uuids["compute1"]
        df = self.ceph.df()
        self.assertEqual(
            df["stats"]["total_bytes"] // GIB,
            self._get_provider_inventory(root)["DISK_GB"]["total"],
        )
        pool = figures.provider_uuid(self.ceph.fsid, POOL)
        self.assertNotIn(pool, {p["uuid"] for p in self._get_all_providers()})
        status = fixture.link("compute1").call("get_status", node_uuid=root)
        self.assertIsNone(status["disk_pool"])
        # A guest's disk counts on the root, as with stock nova.
        flavor = self._create_flavor(vcpu=1, memory_mb=512, disk=7, ephemeral=0)
        server = self._create_server(flavor_id=flavor)
        allocations = self._get_allocations_by_server_uuid(server["id"])
        self.assertEqual(7, allocations[root]["resources"]["DISK_GB"])


def nova_conf():
    import nova.conf

    return nova.conf.CONF


def test_a_missing_ceph_conf_is_one_line(tmp_path):
    conf = nova_conf()
    inprocess.register_nova_opts(conf)
    missing = str(tmp_path / "ceph.conf")
    conf.set_override("images_type", "rbd", group="libvirt")
    conf.set_override("images_rbd_ceph_conf", missing, group="libvirt")
    try:
        # nova's layout reads nothing of the pool: nothing to refuse.
        inprocess.agent_conf(conf, "compute1", str(tmp_path / "state"))
        conf.set_override("images_rbd_disk_on_each_root", False, group="libvirt")
        with pytest.raises(ConfigError) as caught:
            inprocess.agent_conf(conf, "compute1", str(tmp_path / "state"))
    finally:
        for name in ("images_type", "images_rbd_ceph_conf", "images_rbd_disk_on_each_root"):
            conf.clear_override(name, group="libvirt")
    assert str(caught.value) == f"[libvirt] images_rbd_ceph_conf: {missing}: does not exist"
