"""A real two-host nova cloud on rtagent, driven only through nova's REST
API (issue 33; ``make test-cloud``).

Each host runs ``rtagent run`` beside ``rtagent-nova-compute`` over
libvirt's test driver (3 vCPUs at ratio 1.0, 2,048 MB of which 256
reserved); two flavors, small (1 vCPU, 256 MB, 1 GB) and large (2, 512,
1). The scenario's steps run in order on one cloud; after each,
:meth:`~tests.cloud.harness.Cloud.agree` checks that Placement (usages and
every server's allocations), os-hypervisors and each agent's ``rtagent
status --json`` agree with the flavors of the servers on each host, and
that each running host's ComputeNode record (``stats``,
``current_workload``, ``running_vms``: what nova's scheduler reads) is
what stock nova's own ``Stats`` computes for the servers on it, within
:data:`~tests.cloud.harness.BOUND_S`. A step after a failed one fails
at once, naming it.

While a resize or cold migration waits for its confirmation, the source
keeps the old flavor under the migration's consumer, and neither nova
(running_vms) nor the source's agent counts the server there any longer.
The adoption path (stock nova-compute first, resizes waiting for
confirmation in each direction while a host moves to rtagent and back) is
a test of its own.
"""

import contextlib
import time

import pytest

from tests.cloud.control import MAX_IO_OPS
from tests.cloud.harness import ACTION_BOUND_S, start_cloud

A, B = "cloud-a", "cloud-b"


class Scenario:
    def __init__(self, cloud, flavors):
        self.cloud = cloud
        self.small = flavors["small"]
        self.large = flavors["large"]
        # Servers by role, as the steps name them.
        self.named = {}
        self.broken = None

    @contextlib.contextmanager
    def step(self, name):
        if self.broken:
            pytest.fail(f"not run: step {self.broken} failed", pytrace=False)
        try:
            yield
        except Exception:
            self.broken = name
            raise

    def on(self, host, flavor):
        """The scenario's one server of ``flavor`` on ``host``."""
        model = self.cloud.model
        (found,) = [s for s, (h, f) in model.servers.items() if h == host and f == flavor]
        return found

    def agent_free_vcpus(self):
        """host -> VCPUs its agent says further claims can take."""
        free = {}
        for name, host in self.cloud.hosts.items():
            node = host.status_command()["nodes"][0]
            free[name] = node["resources"]["VCPU"]["claims"]["free"]
        return free


@pytest.fixture(scope="class")
def scenario(control, flavors, figures):
    cloud = start_cloud(control, figures, [A, B], on_rtagent=True)
    try:
        yield Scenario(cloud, flavors)
    finally:
        cloud.retire()


def timed(action, *args):
    t0 = time.monotonic()
    value = action(*args)
    return value, time.monotonic() - t0


class TestTwoHostsOnRtagent:
    def test_01_boot_large_to_half_capacity(self, scenario):
        with scenario.step("boot_large"):
            cloud = scenario.cloud
            ids, took = timed(cloud.boot, "large", scenario.large, 2)
            # Each host fits one large server only: they land apart.
            assert {cloud.model.host_of(s) for s in ids} == {A, B}
            cloud.agree("boot_large", action_s=took)

    def test_02_boot_small_to_capacity(self, scenario):
        with scenario.step("boot_small"):
            cloud = scenario.cloud
            ids, took = timed(cloud.boot, "small", scenario.small, 2)
            assert {cloud.model.host_of(s) for s in ids} == {A, B}
            assert scenario.agent_free_vcpus() == {A: 0, B: 0}
            cloud.agree("boot_small_full", action_s=took)

    def test_03_delete_the_small_servers(self, scenario):
        with scenario.step("delete_small"):
            cloud = scenario.cloud
            _, took = timed(
                cloud.delete, scenario.on(A, scenario.small), scenario.on(B, scenario.small)
            )
            cloud.agree("delete_small", action_s=took)

    def test_04_a_boot_that_fits_nowhere(self, scenario):
        with scenario.step("fits_nowhere"):
            cloud = scenario.cloud
            # One free vCPU on each host, two in all: a large server fits on
            # neither, and nothing is oversubscribed.
            assert scenario.agent_free_vcpus() == {A: 1, B: 1}
            _fault, took = timed(cloud.boot_refused, "nowhere", scenario.large)
            cloud.agree("fits_nowhere", action_s=took)

    def test_05_a_boot_that_fits_only_where_rtagent_says_free(self, scenario):
        with scenario.step("fits_where_free"):
            cloud = scenario.cloud
            (first,), took = timed(cloud.boot, "small-1", scenario.small)
            cloud.agree("boot_small_1", action_s=took)
            free = scenario.agent_free_vcpus()
            (where,) = [host for host, vcpus in free.items() if vcpus >= 1]
            assert where != cloud.model.host_of(first)
            (second,), took = timed(cloud.boot, "small-2", scenario.small)
            assert cloud.model.host_of(second) == where
            cloud.agree("fits_where_free", action_s=took)

    def test_06_make_room_for_moves(self, scenario):
        with scenario.step("make_room"):
            cloud = scenario.cloud
            _, took = timed(
                cloud.delete, scenario.on(A, scenario.small), scenario.on(B, scenario.small)
            )
            cloud.agree("make_room", action_s=took)
            scenario.named["mover"] = scenario.on(A, scenario.large)
            scenario.named["stayer"] = scenario.on(B, scenario.large)

    def test_07_resize_waits_for_confirmation(self, scenario):
        with scenario.step("resize_verify"):
            cloud = scenario.cloud
            # large on A -> small: only B can take it (no resize to the same host).
            dest, took = timed(
                cloud.to_verify_resize, scenario.named["mover"], "resize", scenario.small
            )
            assert dest == B
            cloud.agree("resize_verify", action_s=took)

    def test_08_resize_confirmed(self, scenario):
        with scenario.step("resize_confirm"):
            cloud = scenario.cloud
            _, took = timed(cloud.confirm, scenario.named["mover"])
            cloud.agree("resize_confirm", action_s=took)

    def test_09_resize_back_waits_for_confirmation(self, scenario):
        with scenario.step("resize_verify_2"):
            cloud = scenario.cloud
            dest, took = timed(
                cloud.to_verify_resize, scenario.named["mover"], "resize", scenario.large
            )
            assert dest == A
            cloud.agree("resize_verify_2", action_s=took)

    def test_10_resize_reverted(self, scenario):
        with scenario.step("resize_revert"):
            cloud = scenario.cloud
            _, took = timed(cloud.revert, scenario.named["mover"])
            cloud.agree("resize_revert", action_s=took)

    def test_11_cold_migration_waits_for_confirmation(self, scenario):
        with scenario.step("migrate_verify"):
            cloud = scenario.cloud
            dest, took = timed(cloud.to_verify_resize, scenario.named["stayer"], "migrate")
            assert dest == A
            cloud.agree("migrate_verify", action_s=took)

    def test_12_cold_migration_confirmed(self, scenario):
        with scenario.step("migrate_confirm"):
            cloud = scenario.cloud
            _, took = timed(cloud.confirm, scenario.named["stayer"])
            cloud.agree("migrate_confirm", action_s=took)

    def test_13_live_migration(self, scenario):
        with scenario.step("live_migrate"):
            cloud = scenario.cloud
            server = scenario.named["mover"]
            t0 = time.monotonic()
            cloud.nova.action(server, "os-migrateLive", {"block_migration": "auto", "host": None})
            cloud.nova.wait_migration(server, "completed", ACTION_BOUND_S)
            found = cloud.nova.wait_server(server, "ACTIVE", ACTION_BOUND_S)
            assert found["OS-EXT-SRV-ATTR:host"] == A
            cloud.model.place(server, A, scenario.small)
            cloud.agree("live_migrate", action_s=time.monotonic() - t0)

    def test_14_host_stopped_forced_down_evacuated(self, scenario):
        with scenario.step("evacuate"):
            cloud = scenario.cloud
            t0 = time.monotonic()
            stop_s = cloud.hosts[A].stop()
            cloud.nova.force_down(A, True)
            servers = sorted(cloud.model.on(A))
            for server in servers:
                cloud.nova.action(server, "evacuate", {})
            for server in servers:
                cloud.nova.wait_migration(server, "done", ACTION_BOUND_S)
                found = cloud.nova.wait_server(server, "ACTIVE", ACTION_BOUND_S)
                assert found["OS-EXT-SRV-ATTR:host"] == B
                cloud.model.place(server, B, cloud.model.servers[server][1])
                # nova keeps the source's allocation until the source starts again.
                cloud.model.evacuated[server] = A
            cloud.agree("evacuate", action_s=time.monotonic() - t0, stop_s=stop_s)

    def test_15_host_brought_back(self, scenario):
        with scenario.step("bring_back"):
            cloud = scenario.cloud
            t0 = time.monotonic()
            host = cloud.hosts[A]
            host.resume()
            host.wait_agent_ready()
            for server in list(cloud.model.evacuated):
                # The restarted compute service's init_host completes them.
                cloud.nova.wait_migration(server, "completed", ACTION_BOUND_S)
            cloud.nova.force_down(A, False)
            cloud.model.evacuated.clear()
            cloud.wait_hosts_ready("bring_back_ready")
            cloud.agree("bring_back", action_s=time.monotonic() - t0)

    def test_16_deletes(self, scenario):
        with scenario.step("delete_all"):
            cloud = scenario.cloud
            _, took = timed(cloud.delete, *sorted(cloud.model.servers))
            cloud.agree("delete_all", action_s=took)


@pytest.fixture
def adoption(control, flavors, figures):
    cloud = start_cloud(control, figures, ["adopt-a", "adopt-b"], on_rtagent=False)
    try:
        yield cloud
    finally:
        cloud.retire()


def test_adoption_while_resizes_wait_for_confirmation(adoption, flavors):
    cloud = adoption
    a, b = "adopt-a", "adopt-b"
    small, large = flavors["small"], flavors["large"]
    ids = cloud.boot("adopt", large, 2)
    assert {cloud.model.host_of(s) for s in ids} == {a, b}
    cloud.agree("adoption_boot")
    leaving_a = next(s for s in ids if cloud.model.host_of(s) == a)
    leaving_b = next(s for s in ids if cloud.model.host_of(s) == b)
    # One resize waiting for confirmation in each direction.
    assert cloud.to_verify_resize(leaving_a, "resize", small) == b
    assert cloud.to_verify_resize(leaving_b, "resize", small) == a
    cloud.agree("adoption_verify_on_stock_nova")
    t0 = time.monotonic()
    cloud.hosts[a].move_to_rtagent()
    cloud.wait_hosts_ready("adoption_moved_ready")
    cloud.agree("adoption_moved_to_rtagent", action_s=time.monotonic() - t0)
    cloud.confirm(leaving_a)
    cloud.revert(leaving_b)
    cloud.agree("adoption_confirm_and_revert")
    t0 = time.monotonic()
    cloud.hosts[a].move_back_to_stock_nova()
    cloud.wait_hosts_ready("adoption_moved_back_ready")
    cloud.agree("adoption_moved_back", action_s=time.monotonic() - t0)
    cloud.delete(*sorted(cloud.model.servers))
    cloud.agree("adoption_delete_all")


@pytest.fixture
def io_hosts(control, figures):
    cloud = start_cloud(control, figures, ["io-a", "io-b"], on_rtagent=True)
    try:
        yield cloud
    finally:
        cloud.retire()


def test_idle_servers_leave_room_under_io_ops_filter(io_hosts, flavors):
    """nova's scheduler runs IoOpsFilter (max_io_ops_per_host 2): two idle
    servers per host load no host's I/O, so a fifth boot goes ACTIVE."""
    cloud = io_hosts
    small = flavors["small"]
    idle = []
    for name in ("idle-1", "idle-2"):
        idle += cloud.boot(name, small, 2)
        cloud.agree(f"io_{name}")
    assert sorted(cloud.model.host_of(s) for s in idle) == ["io-a", "io-a", "io-b", "io-b"]
    assert MAX_IO_OPS == 2
    (fifth,) = cloud.boot("fifth", small)
    cloud.agree("io_fifth")
    cloud.delete(fifth, *idle)
    cloud.agree("io_deleted")
