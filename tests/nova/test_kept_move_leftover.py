"""A kept move's migration allocation that nova could not delete at its
source (issue 50, make test-cloud-faults' placement_down_60s), in nova's own
harness with the agent embedded.

At the end of a live migration nova's source deletes the allocation the
conductor gave the migration's consumer. With Placement unreachable at that
moment nova's report client logs "Placement API service is not responding"
and returns, the migration completes, and the allocation stays: stock nova
never looks at it again. rtagent's agent reports it as an unknown consumer
(two audits) and, by its RPC contract, never deletes a migration's
consumer; nova-compute's adapter, whose request it was, deletes it then
(rtagent/nova/leftovers.py).

The outage is injected at the one place nova's harness can have it: its
report client's requests for a consumer other than the server's (only the
migration's delete asks for one during the move) raise keystoneauth's
``ConnectFailure``, as a Placement that is down does; the in-process
Placement of nova's harness cannot be stopped.

Run by ``make test-nova`` in .venv-nova.
"""

import fixtures
from keystoneauth1 import exceptions as ks_exc
from nova.scheduler.client import report
from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits


class _Unreachable:
    """Placement unreachable for the requests of consumers other than
    ``spared`` while ``on``; counts the requests it refused."""

    def __init__(self, spared):
        self.spared = spared
        self.on = False
        self.refused = []

    def wrap(self, verb):
        real = getattr(report.SchedulerReportClient, verb)

        def request(client, url, *args, **kwargs):
            if self.on and url.startswith("/allocations/") and self.spared not in url:
                self.refused.append(f"{verb.upper()} {url}")
                raise ks_exc.ConnectFailure("injected: Placement is down")
            return real(client, url, *args, **kwargs)

        return request


class KeptMoveLeftover(KeepsTestMethod, PatientWaits, integrated_helpers.ProviderUsageBaseTestCase):
    compute_driver = "fake.MediumFakeDriver"

    def setUp(self):
        super().setUp()
        self.useFixture(RtagentTrackerFixture("inprocess"))
        placement_started(self.placement.fixture.endpoint)
        self._start_compute(host="host1")
        self._start_compute(host="host2")
        self.flavor = self.api.get_flavors()[0]
        self.source = self._get_provider_uuid_by_host("host1")
        self.dest = self._get_provider_uuid_by_host("host2")

    def _migration_left_at_source(self):
        server = self._boot_and_check_allocations(self.flavor, "host1")
        down = _Unreachable(spared=server["id"])
        for verb in ("get", "put", "delete"):
            self.useFixture(
                fixtures.MonkeyPatch(
                    f"nova.scheduler.client.report.SchedulerReportClient.{verb}",
                    down.wrap(verb),
                )
            )
        # Down from the moment the guest starts to move (the conductor has
        # moved the source's allocation to the migration by then) until the
        # move is over, as make test-cloud-faults' Placement outage.
        moving = self.computes["host1"].driver.live_migration

        def live_migration(*args, **kwargs):
            down.on = True
            return moving(*args, **kwargs)

        self.useFixture(
            fixtures.MockPatchObject(
                self.computes["host1"].driver, "live_migration", new=live_migration
            )
        )
        self._live_migrate(server, host="host2")
        down.on = False
        (migration,) = self.api.api_get(f"/os-migrations?instance_uuid={server['id']}").body[
            "migrations"
        ]
        self.assertEqual("completed", migration["status"])
        # The fault landed where nova deletes the migration's allocation.
        self.assertTrue(down.refused, "no request of the migration's was refused")
        self.assertTrue(all(migration["uuid"] in r for r in down.refused), down.refused)
        return server, migration["uuid"]

    def test_the_allocation_nova_could_not_delete_is_deleted_once_reported(self):
        server, migration = self._migration_left_at_source()
        # nova's failure left it: the migration holds host1, the server host2.
        self.assertIn(migration, self._get_allocations_by_provider_uuid(self.source))

        # The agent reports it as an unknown consumer (two audits of its
        # own finding it, the unknown pass's rule); the periodic that reads
        # the report finds one of nova's kept moves out of host1 and
        # deletes its allocation as nova meant.
        self._run_periodics()
        self._run_periodics()
        self.assertEqual({}, self._get_allocations_by_provider_uuid(self.source))
        self.assertEqual([server["id"]], list(self._get_allocations_by_provider_uuid(self.dest)))
        self.assertRequestMatchesUsage({"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, self.source)
        log = self.stdlog.logger.output
        reported = log.index(f"Consumer {migration} holds allocations on this node's providers")
        deleted = log.index(f"Migration {migration} of instance {server['id']} is completed")
        self.assertLess(reported, deleted)

    def test_a_consumer_that_is_no_migration_of_novas_is_left_alone(self):
        server = self._boot_and_check_allocations(self.flavor, "host1")
        stranger = "5b0b6c3e-8f0c-4c55-9a57-0f4a3a3d0c11"
        project = server["tenant_id"]
        body = {
            "allocations": {self.source: {"resources": {"VCPU": 1}}},
            "project_id": project,
            "user_id": project,
            "consumer_generation": None,
        }
        self.placement.put(f"/allocations/{stranger}", body, version="1.28")
        self._run_periodics()
        self._run_periodics()
        self._run_periodics()
        self.assertIn(stranger, self._get_allocations_by_provider_uuid(self.source))
