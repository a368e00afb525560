"""Retry pauses as tenacity wait strategies, and the pause one makes at
a given attempt.

tenacity runs the agent's blocking retries (:mod:`rtagent.placement.retry`).
Two schedules are driven by a loop of the agent's own instead, because the
thread that waits must keep doing other work meanwhile: the RPC server's
start (:mod:`rtagent.rpc.starter`; the main thread acts on signals and pings
the watchdog) and libvirt's reconnection (:mod:`rtagent.virt.libvirt.connection`;
a reading finds the host unreachable at once and the audit goes on). They
take their pauses from tenacity's strategies through :func:`pause`, so that
every schedule of the agent is written one way.
"""

import random

import tenacity


class FullJitter(tenacity.wait_exponential):
    """tenacity's ``wait_random_exponential`` (uniform in [0, min(cap,
    base x 2^(n-1))] after attempt n) with the random source injected, so
    that tests choose the pauses."""

    def __init__(self, base, cap, rng=random.random):
        super().__init__(multiplier=base, max=cap)
        self._rng = rng

    def __call__(self, retry_state):
        return self._rng() * super().__call__(retry_state)


def pause(wait, attempt):
    """The pause ``wait`` (a tenacity wait strategy) makes after failed
    attempt number ``attempt`` (1-based), outside a tenacity loop."""
    state = tenacity.RetryCallState(None, None, (), {})
    state.attempt_number = attempt
    return wait(state)
