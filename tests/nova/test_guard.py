"""rtagent's tracker in nova's place, and nova's own tracker refused meanwhile.

Run by ``make test-nova`` with ``.venv-nova`` (nova 34.0.0 installed); the
main test run ignores this directory (nova is not one of its packages).
"""

import pytest
from nova.compute import manager as compute_manager
from nova.compute import resource_tracker

from rtagent.nova import guard
from rtagent.nova.resource_tracker import RtagentResourceTracker
from rtagent.nova.testing import RtagentTrackerFixture

NOVA_TRACKER = resource_tracker.ResourceTracker


@pytest.fixture
def in_place():
    fixture = RtagentTrackerFixture("inprocess")
    fixture.setUp()
    yield fixture
    fixture.cleanUp()


def test_compute_manager_builds_rtagents_tracker(in_place):
    # ComputeManager.__init__ looks the class up through this module
    # attribute: what it finds is rtagent's, and not nova's in disguise.
    built = compute_manager.resource_tracker.ResourceTracker
    assert issubclass(built, RtagentResourceTracker)
    assert not issubclass(built, NOVA_TRACKER)


@pytest.mark.parametrize("method", ["instance_claim", "update_available_resource", "_update"])
def test_nova_tracker_cannot_be_built_or_called(in_place, method):
    with pytest.raises(guard.NovaTrackerUsed):
        NOVA_TRACKER("host", driver=None)
    with pytest.raises(guard.NovaTrackerUsed, match=method):
        getattr(NOVA_TRACKER, method)(object.__new__(NOVA_TRACKER))


def test_the_guard_is_lifted_with_the_fixture():
    before = dict(vars(NOVA_TRACKER))
    fixture = RtagentTrackerFixture("inprocess")
    fixture.setUp()
    assert vars(NOVA_TRACKER)["instance_claim"] is not before["instance_claim"]
    fixture.cleanUp()
    assert resource_tracker.ResourceTracker is NOVA_TRACKER
    assert vars(NOVA_TRACKER)["instance_claim"] is before["instance_claim"]
    assert vars(NOVA_TRACKER)["__init__"] is before["__init__"]


def test_every_method_nova_defines_is_guarded():
    names = {name for name, _ in guard.patches(NOVA_TRACKER)}
    assert {"__init__", "instance_claim", "resize_claim", "drop_move_claim_at_source"} <= names
    assert "_update_to_placement" in names
