# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A build reads its node after the claim, as nova's tracker asks its virt
driver at each claim: a host change since the last periodic (a disk grown)
is in Placement within a second of the build, with no periodic run.

nova's ``regressions.test_bug_1595962`` depends on it: it grows the disk by
a mock after the compute service started and live-migrates right after the
build. Run by ``make test-nova`` in .venv-nova, in process and over RPC.
"""

import time

from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

# The prompt sync's bound (docs/placement-sync.md) and some slack.
BOUND_S = 2.0


class _ReadingAtClaim(KeepsTestMethod, PatientWaits):
    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        self.compute = self._start_compute("host1")
        self.rp_uuid = self._get_provider_uuid_by_host("host1")

    def _disk_total(self):
        return self._get_provider_inventory(self.rp_uuid)["DISK_GB"]["total"]

    def _wait_for_disk_total(self, want):
        deadline = time.monotonic() + BOUND_S
        while self._disk_total() != want and time.monotonic() < deadline:
            time.sleep(0.05)
        return self._disk_total()

    def test_a_disk_grown_since_the_periodic_is_in_placement_after_a_build(self):
        before = self._disk_total()
        # The driver's answers change (its reading and its provider tree,
        # which says what Placement holds, as under nova's tracker);
        # nothing runs nova's periodic below.
        driver = self.compute.manager.driver
        driver.resources.local_gb = driver.local_gb = before + 100
        self._boot_and_check_allocations(self.api.get_flavors()[0], "host1")
        self.assertEqual(before + 100, self._wait_for_disk_total(before + 100))


class ReadingAtClaimInProcess(_ReadingAtClaim, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"


class ReadingAtClaimOverRpc(_ReadingAtClaim, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "rpc"
