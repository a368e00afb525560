"""A host runs stock nova-compute, rtagent takes over its accounting, then
stock nova-compute takes it back: nothing lost, nothing counted twice.

nova's own functional harness (real API, conductor, scheduler, computes on
the fake driver, real Placement); run by ``make test-nova`` in .venv-nova.
"""

from nova import context as nova_context
from nova import objects
from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits


class _TwoHosts(KeepsTestMethod, PatientWaits, integrated_helpers.ProviderUsageBaseTestCase):
    """host1 and host2 on nova's fake driver; servers booted where asked."""

    compute_driver = "fake.MediumFakeDriver"

    def setUp(self):
        super().setUp()
        self.ctxt = nova_context.get_admin_context()
        self.computes = {}
        for host in ("host1", "host2"):
            self.computes[host] = self._start_compute(host)
        flavors = sorted(self.api.get_flavors(), key=lambda f: f["ram"])
        self.small, self.large = flavors[0], flavors[1]

    def _boot(self, flavor, host):
        request = self._build_server(
            image_uuid="155d900f-4e14-4e4c-a73d-069cbf4541e6",
            flavor_id=flavor["id"],
            networks="none",
        )
        request["availability_zone"] = f"nova:{host}"
        server = self._wait_for_state_change(self.api.post_server({"server": request}), "ACTIVE")
        self.assertEqual(host, server["OS-EXT-SRV-ATTR:host"])
        return server

    def _usages(self):
        return {
            host: self._get_provider_usages(self._get_provider_uuid_by_host(host))
            for host in self.computes
        }

    def _restart_all(self):
        for host, compute in list(self.computes.items()):
            self.computes[host] = self.restart_compute_service(compute)


class AdoptionAndRollback(_TwoHosts):
    def _agent(self, fixture, host):
        """(status, unknown consumers checked now) of ``host``'s agent."""
        node = self._get_provider_uuid_by_host(host)
        link = fixture.link(host)
        status = link.call("get_status", node_uuid=node)
        return status, link.agent.report_unknown_consumers(node)

    def test_adopt_then_roll_back(self):
        # On stock nova: one server resized from host1 to host2 and
        # confirmed, then one booted on host1.
        moved = self._boot_and_check_allocations(self.small, "host1")
        self._resize_and_check_allocations(
            moved,
            self.small,
            self.large,
            self._get_provider_uuid_by_host("host1"),
            self._get_provider_uuid_by_host("host2"),
        )
        self._confirm_resize(moved)
        stays = self._boot(self.small, "host1")
        before = self._usages()

        # rtagent takes over: every compute service restarts on it.
        fixture = RtagentTrackerFixture("inprocess")
        fixture.setUp()
        in_place = [True]
        self.addCleanup(lambda: in_place[0] and fixture.cleanUp())
        placement_started(self.placement.fixture.endpoint)
        self._restart_all()
        self._run_periodics(raise_on_error=True)
        self._run_periodics(raise_on_error=True)

        self.assertEqual(before, self._usages())
        for host, servers in (("host1", [stays]), ("host2", [moved])):
            status, unknown = self._agent(fixture, host)
            self.assertEqual(sorted(s["id"] for s in servers), status["instance_uuids"])
            self.assertEqual({}, unknown)
            used = status["resources"]
            flavor = self.small if host == "host1" else self.large
            self.assertEqual(flavor["vcpus"], used["VCPU"]["used"])
            self.assertEqual(flavor["ram"], used["MEMORY_MB"]["used"])

        # A new server under rtagent, then back to stock nova.
        again = self._boot(self.small, "host2")
        during = self._usages()
        fixture.cleanUp()
        in_place[0] = False
        self._restart_all()
        self._run_periodics(raise_on_error=True)
        self.assertEqual(during, self._usages())
        for server in (again, stays, moved):
            self._delete_server(server)
        self._run_periodics(raise_on_error=True)
        for usage in self._usages().values():
            self.assertEqual({"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, usage)


class AdoptionWhileMovesWait(_TwoHosts):
    """Issue 31: rtagent takes over two hosts while a resize from host1 to
    host2 and a cold migration from host2 to host1 wait in VERIFY_RESIZE
    (stock nova made both). Before, the agents held neither server nor
    move: both became unknown consumers and the agents counted 0 vCPUs
    where Placement held them."""

    def _hypervisors(self):
        # Usage fields are gone from os-hypervisors since 2.88.
        version, self.admin_api.microversion = self.admin_api.microversion, "2.87"
        try:
            listed = self.admin_api.api_get("/os-hypervisors/detail").body["hypervisors"]
        finally:
            self.admin_api.microversion = version
        return {h["service"]["host"]: h for h in listed}

    def _check_agree(self, fixture, running):
        """Each agent, os-hypervisors and Placement agree; ``running``:
        host -> the servers nova has on it (instance.host)."""
        hypervisors = self._hypervisors()
        for host in self.computes:
            node = self._get_provider_uuid_by_host(host)
            usage = self._get_provider_usages(node)
            link = fixture.link(host)
            status = link.call("get_status", node_uuid=node)
            unknown = link.agent.report_unknown_consumers(node)
            self.assertEqual({}, unknown, host)
            used = {rc: status["resources"][rc]["used"] for rc in usage}
            self.assertEqual(usage, used, host)
            self.assertEqual(usage["VCPU"], hypervisors[host]["vcpus_used"], host)
            self.assertEqual(len(running[host]), hypervisors[host]["running_vms"], host)
            self.assertEqual(sorted(running[host]), sorted(status["instance_uuids"]), host)
            # The per-host counts nova's scheduler filters read
            # (NumInstancesFilter, IoOpsFilter) in the ComputeNode's stats.
            (cn,) = objects.ComputeNodeList.get_all_by_host(self.ctxt, host)
            view = link.call("get_compute_node", node_uuid=node)
            self.assertEqual(
                str(len(running[host])),
                cn.stats.get("num_instances", "0"),
                f"{host}: the record's stats {cn.stats}, the agent's {view['stats']}",
            )

    def _take_over(self):
        """Every compute service restarts on rtagent; :returns: the fixture."""
        fixture = RtagentTrackerFixture("inprocess")
        fixture.setUp()
        self.addCleanup(fixture.cleanUp)
        placement_started(self.placement.fixture.endpoint)
        self._restart_all()
        return fixture

    def _resize_and_migrate(self):
        """One server resized from host1 to host2, one cold-migrated from
        host2 to host1, both left in VERIFY_RESIZE."""
        resized = self._boot(self.small, "host1")
        migrated = self._boot(self.small, "host2")
        self._resize_server(resized, self.large["id"])
        self._migrate_server(migrated)
        for server, host in ((resized, "host2"), (migrated, "host1")):
            self.assertEqual(host, self.api.get_server(server["id"])["OS-EXT-SRV-ATTR:host"])
        # Each host: its arrival's new flavor and its departure's old one.
        self.assertFlavorMatchesUsage(
            self._get_provider_uuid_by_host("host1"), self.small, self.small
        )
        self.assertFlavorMatchesUsage(
            self._get_provider_uuid_by_host("host2"), self.large, self.small
        )
        return resized, migrated

    def _confirm_revert_delete(self, fixture, resized, migrated):
        # Each source keeps the old flavor (the migration consumer), each
        # destination runs its server with the new one.
        self._check_agree(fixture, {"host1": [migrated["id"]], "host2": [resized["id"]]})
        self._confirm_resize(resized)
        self._revert_resize(migrated)
        self._run_periodics(raise_on_error=True)
        self._check_agree(fixture, {"host1": [], "host2": [resized["id"], migrated["id"]]})
        self.assertFlavorMatchesUsage(
            self._get_provider_uuid_by_host("host2"), self.large, self.small
        )
        self.assertEqual(
            {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0},
            self._get_provider_usages(self._get_provider_uuid_by_host("host1")),
        )
        for server in (resized, migrated):
            self._delete_server(server)
        self._run_periodics(raise_on_error=True)
        self._check_agree(fixture, {"host1": [], "host2": []})

    def test_taken_over_while_a_resize_and_a_migration_wait(self):
        resized, migrated = self._resize_and_migrate()
        before = self._usages()
        fixture = self._take_over()
        self._run_periodics(raise_on_error=True)
        self._run_periodics(raise_on_error=True)
        self.assertEqual(before, self._usages())
        self._confirm_revert_delete(fixture, resized, migrated)

    def test_a_record_written_elsewhere_is_right_after_the_periodic(self):
        """The tracker's copy of the ComputeNode record holds what it saved,
        not what the row holds: a write from elsewhere after the take-over
        (a stock nova-compute's last one, in flight while it stopped), or
        one of its own that was lost (nova's in-memory SQLite fixture
        shares one connection among threads: another thread's rollback
        undid a save, seen in a trace of this class under load), stayed
        in the row while the view equalled the copy. The periodic writes
        the whole view."""
        fixture = self._take_over()
        server = self._boot(self.small, "host1")
        self._run_periodics(raise_on_error=True)
        self._check_agree(fixture, {"host1": [server["id"]], "host2": []})
        (elsewhere,) = objects.ComputeNodeList.get_all_by_host(self.ctxt, "host1")
        elsewhere.stats = {"num_instances": "0", "io_workload": "0", "failed_builds": "0"}
        elsewhere.save()
        self._run_periodics(raise_on_error=True)
        self._check_agree(fixture, {"host1": [server["id"]], "host2": []})

    def test_moves_made_on_rtagent_wait_then_end(self):
        """The source learns of the move at its next periodic, as nova's
        source tracker does: then its agent knows the migration consumer
        and no longer counts the server that left (running_vms)."""
        fixture = self._take_over()
        resized, migrated = self._resize_and_migrate()
        self._run_periodics(raise_on_error=True)
        self._confirm_revert_delete(fixture, resized, migrated)
