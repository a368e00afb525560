"""One periodic audit reads the virt driver once per node, as nova's own
resource tracker does, in nova's own harness.

Why it matters beyond the cost: nova's libvirt driver queries nova's
database while it answers ``get_available_resource``, without targeting a
cell, and nova's functional tests serialise such reads behind one lock
(``CellDatabases``). A second reading late in the periodic widened the
window in which a test's own ``_run_periodics`` (holding that lock as a
reader) and an API request (waiting for it as a writer) shut the audit
out for good: ``test_numa_live_migration`` and
``test_bug_1894095_post_drop`` hung in CI that way.

Run by ``make test-nova`` in .venv-nova, in process and over RPC.
"""

import collections

import fixtures
from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits


class _OneReading(KeepsTestMethod, PatientWaits):
    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        self.computes = {host: self._start_compute(host) for host in ("host1", "host2")}

    def _count_readings(self):
        """{(host, node): calls} of every compute's ``get_available_resource``."""
        calls = collections.Counter()
        for host, compute in self.computes.items():
            driver = compute.manager.driver
            real = driver.get_available_resource

            def counted(nodename, _host=host, _real=real):
                calls[(_host, nodename)] += 1
                return _real(nodename)

            self.useFixture(fixtures.MockPatchObject(driver, "get_available_resource", counted))
        return calls

    def test_a_periodic_reads_each_node_once(self):
        flavor = self.api.get_flavors()[0]
        self._boot_and_check_allocations(flavor, "host1")
        calls = self._count_readings()

        self._run_periodics(raise_on_error=True)

        nodes = {
            (host, compute.manager.driver.get_available_nodes()[0])
            for host, compute in self.computes.items()
        }
        self.assertEqual(dict.fromkeys(nodes, 1), dict(calls))
        # And the audit still saw the host: the instance is counted.
        usages = self._get_provider_usages(self._get_provider_uuid_by_host("host1"))
        self.assertEqual(flavor["vcpus"], usages["VCPU"])


class OneReadingInProcess(_OneReading, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"


class OneReadingOverRpc(_OneReading, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "rpc"
