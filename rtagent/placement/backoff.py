"""The sync's state for operators, and its retries while Placement is failing.

Claims never depend on Placement; only the sync does. After a failed sync
the next attempt is due at a random point of the retry window (0, W]; while
it keeps failing, every W after the previous attempt, the same phase kept.
W (``[rtagent] placement_retry_window``, 110 s) is also the cap: an agent
tries again at most W after Placement returns, and the service loop wakes
for it (:meth:`SyncBackoff.pending_retry`) rather than waiting for its next audit.

Why a fixed period with a random phase rather than exponential backoff with
full jitter: what a fleet's recovery costs Placement is how the retries of
the agents that met an outage fall after it ends. With a fixed period W and
phases drawn uniformly, they fall evenly over the W after it ends (one
agent in W/tick per tick), whatever the outage's length. With
exponential pauses the agents that failed last retry first and soonest, so
the retries bunch in the first seconds; a fleet model at 1,000 agents, a
60 s audit and a 300 s refresh gave a peak of 2.0x the steady rate for
full-jitter exponential backoff (cap 120 s) against 1.6x for this schedule,
all agents in sync within 110 s either way. The cost: a single failure is
retried after W/2 on average, not within seconds. ``status()`` is what
``rtagent status`` shows.
"""

import dataclasses
import random
import time


@dataclasses.dataclass(frozen=True)
class SyncStatus:
    """:param in_sync: the last attempt succeeded.
    :param last_success: wall-clock time (s) of the last success, or None.
    :param last_error: ``"code: message"`` of the last failure, or None once
        a sync succeeds again.
    :param failures: consecutive failed attempts.
    :param retry_in: seconds until the next attempt is due (0 if due now).
    """

    in_sync: bool
    last_success: float | None
    last_error: str | None
    failures: int
    retry_in: float

    def to_dict(self):
        return dataclasses.asdict(self)


class SyncBackoff:
    """Success/failure bookkeeping and retry schedule for one node's sync.

    :param window: seconds, W in the module doc; 0 retries at once.
    """

    def __init__(
        self,
        window=110.0,
        clock=time.monotonic,
        wall=time.time,
        rng=random.random,
    ):
        self._window = window
        self._clock = clock
        self._wall = wall
        self._rng = rng
        self._in_sync = False
        self._last_success = None
        self._last_error = None
        self._failures = 0
        self._next = None

    def due(self):
        """True if a sync should be attempted now."""
        return self._next is None or self._clock() >= self._next

    def pending_retry(self):
        """Seconds until the next attempt after a failure (0 if due), or
        None when no retry is pending (in sync, or never tried)."""
        if self._failures == 0:
            return None
        return max(0.0, self._next - self._clock())

    def record_success(self):
        self._in_sync = True
        self._last_success = self._wall()
        self._last_error = None
        self._failures = 0
        self._next = None

    def record_failure(self, exc):
        """Record a failed sync (any error) and schedule the next attempt.
        :returns: seconds until it."""
        self._in_sync = False
        self._failures += 1
        code = getattr(exc, "code", type(exc).__name__)
        self._last_error = f"{code}: {exc}"
        now = self._clock()
        if self._failures == 1 or self._next is None or not self._window:
            # The phase, drawn once per run of failures.
            pause = self._rng() * self._window
        else:
            # The next point of the phase's comb (k W after the attempt that
            # was due), not W after this failure: a slow request or a late
            # audit must not shift the phase, or the fleet's retries drift
            # together.
            pause = self._window - (now - self._next) % self._window
        self._next = now + pause
        return pause

    def status(self):
        retry_in = 0.0 if self._next is None else max(0.0, self._next - self._clock())
        return SyncStatus(
            in_sync=self._in_sync,
            last_success=self._last_success,
            last_error=self._last_error,
            failures=self._failures,
            retry_in=retry_in,
        )
