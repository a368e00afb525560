"""What rtagent's tests in nova's own harness share."""


class KeepsTestMethod:
    """nova's clean-up drops every public attribute of the test case;
    pytest keeps the test method as one and looks it up again after the
    test, so it is put back. Mix in before nova's test base class."""

    def _clear_attrs(self):
        name = self._testMethodName
        method = self.__dict__.get(name)
        super()._clear_attrs()
        if method is not None:
            setattr(self, name, method)


def take_over(test, hostname):
    """rtagent takes over ``hostname``'s accounting in a test of nova's
    libvirt harness, as docs/nova.md's adoption steps do: the compute
    service restarts on rtagent's tracker (in process) and runs its first
    periodic. :returns: the installed ``RtagentTrackerFixture``."""
    from rtagent.nova.testing import RtagentTrackerFixture, placement_started

    fixture = RtagentTrackerFixture("inprocess")
    fixture.setUp()
    test.addCleanup(fixture.cleanUp)
    placement_started(test.placement_fixture.endpoint)
    test.restart_compute_service(hostname)
    test._run_periodics(raise_on_error=True)
    return fixture
