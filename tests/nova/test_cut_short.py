"""A move cut short at its source (docs/faults.md): nova-compute there
restarted while the guest was leaving, in nova's own harness.

nova's ``init_host`` keeps the guest on the source and resets its task; it
sets a live migration to ``error`` and leaves a cold migration
``migrating``, and gives no allocation back (nova bug 1836369, which nova's
``test_init_host`` asserts right after the restart). rtagent keeps those
books for one audit, the one at the service's start, and settles the move
at the next periodic that finds it so (``rtagent.nova.abandoned``): the
destination freed, the source's allocation back on the instance, the
migration's consumer empty and the move ``error``, reverted by both agents.

The crash is nova's test's: the source's driver restarts its compute
service from inside the move, then never returns (a killed process does
not go on). A live migration cannot be cut short so in this harness: its
source runs in one of nova's executors, which the service's stop waits
for; make test-cloud-faults' compute_kill_live_migration covers it. Run by
``make test-nova`` in .venv-nova, in process and over RPC.
"""

import threading
import time
from unittest import mock

from nova import context as nova_context
from nova import objects
from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

# Seconds the restarted service may take to start (its startup audit).
RESTART_S = 60


class _CutShort(KeepsTestMethod, PatientWaits):
    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.rtagent = self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        for host in ("host1", "host2"):
            self._start_compute(host)
        self.ctxt = nova_context.get_admin_context()
        self.flavor = self.api.get_flavors()[0]

    def _crash_in(self, source, method):
        """Patch the source driver's ``method`` to restart the source's
        compute service (a kill, then a start) and block for good; :returns:
        an event set once the new service has started (its startup audit
        done)."""
        restarted = threading.Event()

        def crash(*args, **kwargs):
            self.computes[source] = self.restart_compute_service(self.computes[source])
            restarted.set()
            # Returning would let the old service go on with the move, which a
            # killed process does not; a long sleep (a green one under nova's
            # eventlet patching) keeps it from touching later tests' books.
            time.sleep(1_000_000)

        driver = self.computes[source].manager.driver
        patcher = mock.patch.object(driver, method, side_effect=crash)
        patcher.start()
        self.addCleanup(patcher.stop)
        return restarted

    def _server(self):
        server = self._create_server(flavor_id=self.flavor["id"], networks="none")
        source = server["OS-EXT-SRV-ATTR:host"]
        dest = "host2" if source == "host1" else "host1"
        return server, source, dest

    def _after_the_restart(self, server, source, restarted):
        self.assertTrue(restarted.wait(RESTART_S), "the source's service restarted")
        return self._wait_for_server_parameter(
            server,
            {"status": "ACTIVE", "OS-EXT-STS:task_state": None, "OS-EXT-SRV-ATTR:host": source},
        )

    def _held(self, host):
        node = self._get_provider_uuid_by_host(host)
        status = self.rtagent.link(host).call("get_status", node_uuid=node)
        return set(status["instance_uuids"])

    def _books_as_nova_leaves_them(self, server, source, dest, migration):
        """nova bug 1836369: the guest on the source, its allocation held
        by the migration there and by the instance at the destination."""
        source_rp = self._get_provider_uuid_by_host(source)
        dest_rp = self._get_provider_uuid_by_host(dest)
        self.assertIn(server["id"], self._get_allocations_by_provider_uuid(dest_rp))
        at_source = self._get_allocations_by_provider_uuid(source_rp)
        self.assertNotIn(server["id"], at_source)
        self.assertIn(migration.uuid, at_source)

    def _books_put_back(self, server, source, dest, migration):
        source_rp = self._get_provider_uuid_by_host(source)
        dest_rp = self._get_provider_uuid_by_host(dest)
        self.assertNotIn(server["id"], self._get_allocations_by_provider_uuid(dest_rp))
        self.assertFlavorMatchesAllocation(self.flavor, server["id"], source_rp)
        self.assertEqual({}, self._get_allocations_by_server_uuid(migration.uuid))
        self.assertEqual("error", objects.Migration.get_by_uuid(self.ctxt, migration.uuid).status)

    def test_a_cold_migration_cut_short_is_settled_at_the_second_audit(self):
        server, source, dest = self._server()
        restarted = self._crash_in(source, "migrate_disk_and_power_off")
        self.admin_api.post_server_action(server["id"], {"migrate": None})
        server = self._after_the_restart(server, source, restarted)
        # nova's init_host left the migration under way.
        migration = objects.Migration.get_by_instance_and_status(
            self.ctxt, server["id"], "migrating"
        )

        # The startup audit alone: nova's books, as nova's test_init_host
        # asserts them.
        self._books_as_nova_leaves_them(server, source, dest, migration)

        self.computes[source].manager.update_available_resource(self.ctxt)
        self._books_put_back(server, source, dest, migration)
        # The destination's agent reverts the move at its own periodic.
        self._run_periodics()
        self.assertNotIn(server["id"], self._held(dest))
        self.assertIn(server["id"], self._held(source))
        self.assertRequestMatchesUsage(
            {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, self._get_provider_uuid_by_host(dest)
        )


class CutShortInProcess(_CutShort, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"


class CutShortOverRpc(_CutShort, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "rpc"
