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


class PatientWaits:
    """nova's helpers wait 5 s (10 looks, 0.5 s apart) for a server's
    state, a service's or an assertion: a build on nova's libvirt harness
    takes about 1 s alone, and more than 5 s when CI runs tests/nova beside
    make test and the nova cloud on 2 cores (a pinned build timed out so).
    Here they wait up to a minute (notifications up to two): a guard
    against a hang, not a measure of speed. Mix in before nova's test base
    class."""

    LOOKS = 120
    # nova's notification waits give up after 10 s: a resize's end took
    # longer in CI's tests/nova run beside the benchmarks' controls.
    NOTIFICATION_S = 120.0

    def setUp(self):
        super().setUp()
        notifier = getattr(self, "notifier", None)
        if notifier is not None:
            wait = notifier.wait_for_versioned_notifications

            def patient(event_type, n_events=1, timeout=10.0):
                return wait(event_type, n_events, max(timeout, self.NOTIFICATION_S))

            notifier.wait_for_versioned_notifications = patient

    def _wait_for_server_parameter(self, server, expected_params, max_retries=10, **kwargs):
        return super()._wait_for_server_parameter(
            server, expected_params, max(max_retries, self.LOOKS), **kwargs
        )

    def _wait_for_service_parameter(
        self, service_hostname, service_binary, expected_params, max_retries=10, **kwargs
    ):
        return super()._wait_for_service_parameter(
            service_hostname,
            service_binary,
            expected_params,
            max(max_retries, self.LOOKS),
            **kwargs,
        )

    def _wait_for_assert(self, assert_func, max_retries=10, sleep=0.5):
        return super()._wait_for_assert(assert_func, max(max_retries, self.LOOKS), sleep)


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
