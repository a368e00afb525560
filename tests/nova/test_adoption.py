"""A host runs stock nova-compute, rtagent takes over its accounting, then
stock nova-compute takes it back: nothing lost, nothing counted twice.

nova's own functional harness (real API, conductor, scheduler, computes on
the fake driver, real Placement); run by ``make test-nova`` in .venv-nova.
"""

from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod


class AdoptionAndRollback(KeepsTestMethod, integrated_helpers.ProviderUsageBaseTestCase):
    compute_driver = "fake.MediumFakeDriver"

    def setUp(self):
        super().setUp()
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
