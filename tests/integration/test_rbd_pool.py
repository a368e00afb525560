"""Guests' disks in a real Ceph pool (issue 52): a private single-node
cluster (rtagent.testing.ceph) and a real Placement process; agents built
as the service builds them, on libvirt's test driver with a host name each.

Skipped where Ceph cannot run here, except on CI (tests/requirements.py).
"""

import json
import os
import signal
import subprocess
import time
import uuid

import libvirt
import pytest

from rtagent import conf as rtconf
from rtagent.placement.backoff import SyncBackoff
from rtagent.rpc import status as statusmod
from rtagent.service import builder
from rtagent.testing import ceph as cephmod
from rtagent.testing.placement_server import admin_adapter
from rtagent.testing.ports import free_port
from rtagent.tracker import errors as tracker_errors
from rtagent.tracker.model import Flavor
from rtagent.virt.libvirt.driver import LibvirtDriver
from rtagent.virt.rbd import cluster, figures
from tests.functional.test_cli import RTAGENT, rtagent, write_conf
from tests.requirements import require

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_URI = "test:///" + os.path.join(ROOT, "etc", "rtagent", "demo-host.xml")
POOL = "vms"
GIB = 1024**3
PAYLOAD = 4 * 1024 * 1024
# The guest whose root disk nova made in the pool (on host "cmp-a").
GUEST = "3f0c6d52-96a4-4f6e-8a3e-2a5e7a3b1c01"


@pytest.fixture(scope="module")
def ceph():
    require(cephmod.missing_requirements() or cluster.missing_bindings(), "Ceph")
    with cephmod.CephCluster() as c:
        c.create_pool(POOL)
        c.write_object(POOL, "payload", PAYLOAD)
        # ceph df's figures follow writes by a few seconds (the manager's
        # stats period): compare ours with its figures once they show it.
        deadline = time.monotonic() + 30
        while pool_df(c)[0]["stored"] < PAYLOAD:
            assert time.monotonic() < deadline, "ceph df never showed the payload"
            time.sleep(1)
        c.cli("create", f"{POOL}/{GUEST}_disk", "--size", "1G", binary="rbd")
        c.cli("create", f"{POOL}/some-glance-image", "--size", "64M", binary="rbd")
        yield c


class NamedConnection:
    """The test driver's connection under a host name of our choosing (the
    test driver answers the machine's own, and two agents need two)."""

    def __init__(self, conn, name):
        self._conn, self._name = conn, name

    def __getattr__(self, attr):
        return getattr(self._conn, attr)

    def getHostname(self):
        return self._name


def make_conf(tmp_path, name, ceph, **libvirt_opts):
    conf = rtconf.new_conf()
    conf([], project="rtagent", default_config_files=[])
    base = tmp_path / name
    (base / "instances").mkdir(parents=True, exist_ok=True)
    conf.set_override("state_path", str(base / "state"))
    conf.set_override("host", name)
    conf.set_override("connection_uri", DEMO_URI, group="libvirt")
    conf.set_override("instances_path", str(base / "instances"), group="libvirt")
    conf.set_override("placement_refresh_interval", 0, group="rtagent")
    opts = {
        "images_type": "rbd",
        "images_rbd_pool": POOL,
        "images_rbd_ceph_conf": ceph.conf_path,
        "rbd_connect_timeout": 2,
    }
    opts.update(libvirt_opts)
    for opt, value in opts.items():
        conf.set_override(opt, value, group="libvirt")
    return conf


@pytest.fixture
def make_agent(tmp_path, placement, ceph):
    agents = []

    def make(name, **libvirt_opts):
        conf = make_conf(tmp_path, name, ceph, **libvirt_opts)
        driver = builder.with_disk_pool(
            conf,
            LibvirtDriver(
                DEMO_URI,
                conf.libvirt.instances_path,
                opener=lambda uri: NamedConnection(libvirt.openReadOnly(uri), name),
            ),
        )
        # With the service role, as an agent's service user has it in a
        # cloud: POST /reshaper needs it.
        adapter = admin_adapter(placement.endpoint)
        adapter.additional_headers = {"X-Roles": "admin,service"}
        agent = builder.build_agent(
            conf,
            driver=driver,
            adapter=adapter,
            make_backoff=lambda: SyncBackoff(window=0),
        )
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()


@pytest.fixture
def operator(placement):
    return admin_adapter(placement.endpoint)


def get(adapter, url):
    resp = adapter.get(url)
    assert resp.status_code == 200, resp.text
    return resp.json()


def pool_df(ceph):
    """The pool's entry in ``ceph df`` (the CLI: another reader than ours)."""
    df = ceph.df()
    return next(p["stats"] for p in df["pools"] if p["name"] == POOL), df["stats"]


def schedule(operator, consumer, root, pool, disk_gb):
    """Write a guest's allocation as nova's scheduler would: CPU and memory
    from the host's root, its disk from the pool's provider."""
    resp = operator.put(
        f"/allocations/{consumer}",
        json={
            "allocations": {
                root: {"resources": {"VCPU": 1, "MEMORY_MB": 256}},
                pool: {"resources": {"DISK_GB": disk_gb}},
            },
            "project_id": "p",
            "user_id": "u",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        },
    )
    assert resp.status_code == 204, resp.text


def pool_state(operator, pool):
    """What an agent may write on the pool's provider: generation aside."""
    return (
        get(operator, f"/resource_providers/{pool}/inventories")["inventories"],
        sorted(get(operator, f"/resource_providers/{pool}/traits")["traits"]),
        sorted(get(operator, f"/resource_providers/{pool}/aggregates")["aggregates"]),
    )


def test_two_agents_share_the_pool_once(make_agent, operator, ceph):
    a, b = make_agent("cmp-a"), make_agent("cmp-b")
    a.audit()
    b.audit()
    root_a, root_b = a.tracker.node_uuid, b.tracker.node_uuid
    fsid = json.loads(ceph.cli("fsid", "--format", "json"))["fsid"]
    pool = figures.provider_uuid(fsid, POOL)
    aggregate = figures.aggregate_uuid(fsid, POOL)

    # Placement shows the pool's DISK_GB once, on the sharing provider.
    with_disk = get(operator, "/resource_providers?resources=DISK_GB:1")["resource_providers"]
    assert [p["uuid"] for p in with_disk] == [pool]
    invs, traits, aggregates = pool_state(operator, pool)
    assert "MISC_SHARES_VIA_AGGREGATE" in traits
    assert aggregates == [aggregate]
    for root in (root_a, root_b):
        assert get(operator, f"/resource_providers/{root}/aggregates")["aggregates"] == [aggregate]
        assert (
            "DISK_GB" not in get(operator, f"/resource_providers/{root}/inventories")["inventories"]
        )
    # The figures are ceph df's for the pool: what it stores plus what can
    # still be written, floor GiB (docs/rbd.md, "Figures").
    stats, cluster_stats = pool_df(ceph)
    expected = (stats["stored"] + stats["max_avail"]) // GIB
    print(
        f"ceph df {POOL}: stored={stats['stored']} max_avail={stats['max_avail']} "
        f"cluster total_bytes={cluster_stats['total_bytes']}; "
        f"Placement DISK_GB total={invs['DISK_GB']['total']} expected={expected}"
    )
    assert invs["DISK_GB"]["total"] == expected
    assert invs["DISK_GB"]["reserved"] == 0

    # A claim on either host takes from the one pool.
    guest_b = str(uuid.uuid4())
    schedule(operator, GUEST, root_a, pool, 10)
    a.tracker.instance_claim(GUEST, Flavor(1, 256, 10))
    schedule(operator, guest_b, root_b, pool, 15)
    b.tracker.instance_claim(guest_b, Flavor(1, 256, 15))
    a.audit()
    b.audit()
    usages = get(operator, f"/resource_providers/{pool}/usages")["usages"]
    assert usages["DISK_GB"] == 25
    capacity = invs["DISK_GB"]["total"] * invs["DISK_GB"]["allocation_ratio"]
    free = int(capacity) - 25
    # Placement's answer and the agents' agree on what is left.
    cands = get(operator, f"/allocation_candidates?resources=DISK_GB:{free}")
    assert cands["allocation_requests"], "Placement offers the pool's last GiB"
    assert not get(operator, f"/allocation_candidates?resources=DISK_GB:{free + 1}")[
        "allocation_requests"
    ]
    for agent in (a, b):
        with pytest.raises(tracker_errors.ComputeResourcesUnavailable) as info:
            agent.tracker.instance_claim(str(uuid.uuid4()), Flavor(1, 256, free + 1))
        assert f"DISK_GB: requested {free + 1}, free {free} of capacity" in str(info.value)
    # The last GiB fits on either: claimed (and aborted) on b.
    last = str(uuid.uuid4())
    b.tracker.instance_claim(last, Flavor(1, 256, free))
    b.tracker.abort_instance_claim(last)

    # Neither reports the other's guest as an unknown consumer of its own.
    assert a.report_unknown_consumers() == {}
    assert b.report_unknown_consumers() == {}
    # The disk nova made in the pool for GUEST is that instance's.
    status_a = statusmod.node_status(a.tracker.snapshot())["disk_pool"]
    status_b = statusmod.node_status(b.tracker.snapshot())["disk_pool"]
    assert (status_a["instance_disks_here"], status_a["instance_disks_elsewhere"]) == (1, 0)
    assert (status_b["instance_disks_here"], status_b["instance_disks_elsewhere"]) == (0, 1)
    assert status_a["other_images"] == 1
    assert (status_a["others_gb"], status_b["others_gb"]) == (15, 10)


def test_a_silent_then_stopped_cluster_keeps_the_last_figures(make_agent, operator, ceph):
    a = make_agent("cmp-a")
    a.audit()
    pool = a.tracker.snapshot().host.disk_pool.provider_uuid
    root = a.tracker.node_uuid
    before = pool_state(operator, pool)
    root_before = get(operator, f"/resource_providers/{root}/inventories")["inventories"]
    mon = ceph.pids["mon"]
    os.kill(mon, signal.SIGSTOP)  # a monitor that accepts and never answers
    try:
        started = time.monotonic()
        a.audit()
        seconds = time.monotonic() - started
        print(f"audit with a silent monitor: {seconds:.2f} s (bound 2 s)")
        assert seconds < 6
        reading = a.tracker.snapshot().host.disk_pool
        assert reading.stale_since is not None
        assert "no answer from the cluster within 2 s" in reading.error
    finally:
        os.kill(mon, signal.SIGCONT)
    ceph.stop_daemons(("mon",))
    try:
        a.audit()
        snap = a.tracker.snapshot()
        assert snap.host.disk_pool.stale_since == reading.stale_since  # since the first failure
        # Claims go on, against the last figures.
        consumer = str(uuid.uuid4())
        schedule(operator, consumer, root, pool, 20)
        a.tracker.instance_claim(consumer, Flavor(1, 256, 20))
        a.audit()
        status = statusmod.node_status(a.tracker.snapshot())["disk_pool"]
        assert status["stale"] and status["stale_since"] == reading.stale_since
        # Nothing in Placement changed but the scheduler's allocation.
        assert pool_state(operator, pool) == before
        assert get(operator, f"/resource_providers/{root}/inventories")["inventories"] == (
            root_before
        )
    finally:
        ceph.start_daemons(("mon",))
    a.audit()
    assert a.tracker.snapshot().host.disk_pool.stale_since is None


def test_hosts_moved_onto_the_pool_and_back_keep_their_allocations(make_agent, operator, ceph):
    # Two hosts on local disk, each with a guest whose disk is on its root.
    guests = {}
    for name in ("cmp-a", "cmp-b"):
        agent = make_agent(name, images_type="default")
        agent.audit()
        consumer = str(uuid.uuid4())
        root = agent.tracker.node_uuid
        resp = operator.put(
            f"/allocations/{consumer}",
            json={
                "allocations": {root: {"resources": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 5}}},
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            },
        )
        assert resp.status_code == 204, resp.text
        agent.tracker.instance_claim(consumer, Flavor(1, 256, 5))
        agent.close()
        guests[name] = (consumer, root)
    # Restarted on the pool: the first creates its provider (the class
    # appears there), the second joins it (the class is there already);
    # each one's guest disk moves by a reshape.
    on_pool = {}
    for name in ("cmp-a", "cmp-b"):
        on_pool[name] = make_agent(name)
        on_pool[name].audit()
    pool = None
    for consumer, root in guests.values():
        allocs = get(operator, f"/allocations/{consumer}")["allocations"]
        assert allocs[root]["resources"] == {"VCPU": 1, "MEMORY_MB": 256}
        (pool,) = set(allocs) - {root}
        assert allocs[pool]["resources"] == {"DISK_GB": 5}
        assert (
            "DISK_GB" not in get(operator, f"/resource_providers/{root}/inventories")["inventories"]
        )
    assert get(operator, f"/resource_providers/{pool}/usages")["usages"]["DISK_GB"] == 10

    # cmp-a back to nova's layout: its guest's disk returns to its root;
    # cmp-b's stays on the pool, which stays.
    on_pool["cmp-a"].close()
    make_agent("cmp-a", images_rbd_disk_on_each_root=True).audit()
    consumer, root = guests["cmp-a"]
    allocs = get(operator, f"/allocations/{consumer}")["allocations"]
    assert {rp: a["resources"] for rp, a in allocs.items()} == {
        root: {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 5}
    }
    assert get(operator, f"/resource_providers/{root}/aggregates")["aggregates"] == []
    assert get(operator, f"/resource_providers/{pool}/usages")["usages"]["DISK_GB"] == 5


def test_nova_layout_puts_the_cluster_on_each_root(make_agent, operator, ceph):
    a = make_agent("cmp-a", images_rbd_disk_on_each_root=True)
    a.audit()
    root = a.tracker.node_uuid
    _, cluster_stats = pool_df(ceph)
    invs = get(operator, f"/resource_providers/{root}/inventories")["inventories"]
    assert invs["DISK_GB"]["total"] == cluster_stats["total_bytes"] // GIB
    assert get(operator, f"/resource_providers/{root}/aggregates")["aggregates"] == []
    names = [p["name"] for p in get(operator, "/resource_providers")["resource_providers"]]
    assert names == ["cmp-a"], "no pool provider in nova's layout"


def wait_status(conf, predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        result = rtagent("--config-file", str(conf), "status", timeout=30)
        if result.returncode == 0 and predicate(result.stdout):
            return result.stdout
        assert time.monotonic() < deadline, f"never {what}: {result.stdout}{result.stderr}"
        time.sleep(0.5)


def test_the_daemon_on_a_host_whose_guests_live_in_the_pool(tmp_path, ceph, placement, operator):
    conf = write_conf(
        tmp_path,
        endpoint=placement.endpoint,
        extra=f"[DEFAULT]\ntransport_url =\n[health]\nport = {free_port()}\n"
        f"[libvirt]\nimages_type = rbd\nimages_rbd_pool = {POOL}\n"
        f"images_rbd_ceph_conf = {ceph.conf_path}\nrbd_connect_timeout = 2\n",
    )
    log = open(tmp_path / "agent.log", "wb")
    agent = subprocess.Popen(
        [RTAGENT, "--config-file", str(conf), "run"], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        text = wait_status(conf, lambda t: "placement: in sync" in t, "in sync")
        assert "  disk pool: RBD vms, DISK_GB on shared provider " in text
        assert "  health: ok" in text
        (pool,) = [
            p["uuid"]
            for p in get(operator, "/resource_providers?resources=DISK_GB:1")["resource_providers"]
        ]
        before = pool_state(operator, pool)
        stats, _ = pool_df(ceph)
        assert before[0]["DISK_GB"]["total"] == (stats["stored"] + stats["max_avail"]) // GIB

        ceph.stop_daemons(("mon",))
        try:
            text = wait_status(conf, lambda t: "STALE since" in t, "stale")
            print(text)
            assert "the last figures stay in force and nothing is written for the pool" in text
            assert "health: UNHEALTHY: " in text and "reading is stale since" in text
            time.sleep(3)  # three more audits (audit_interval = 1)
            assert pool_state(operator, pool) == before
        finally:
            ceph.start_daemons(("mon",))
        text = wait_status(conf, lambda t: "STALE" not in t and "health: ok" in t, "fresh again")
        assert agent.poll() is None
    finally:
        agent.terminate()
        agent.wait(timeout=30)
        log.close()
