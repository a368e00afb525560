"""The sync's state for operators, and its backoff while Placement is failing.

Claims never depend on Placement; only the sync does. While syncs fail,
:meth:`SyncBackoff.due` spaces the attempts out with full jitter (uniform in
[0, min(cap, base x 2^(failures-1))]) so that a fleet of agents does not
hit a Placement that comes back all in the same second. The first success
clears the backoff. ``status()`` is what ``rtagent status`` shows.
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
    """Success/failure bookkeeping and backoff for one node's sync.

    :param base_delay, max_delay: seconds (see module doc).
    """

    def __init__(
        self,
        base_delay=10.0,
        max_delay=120.0,
        clock=time.monotonic,
        wall=time.time,
        rng=random.random,
    ):
        self._base = base_delay
        self._cap = max_delay
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

    def record_success(self):
        self._in_sync = True
        self._last_success = self._wall()
        self._last_error = None
        self._failures = 0
        self._next = None

    def record_failure(self, exc):
        """Record a failed sync (any error) and schedule the next attempt."""
        self._in_sync = False
        self._failures += 1
        code = getattr(exc, "code", type(exc).__name__)
        self._last_error = f"{code}: {exc}"
        pause = self._rng() * min(self._cap, self._base * 2 ** (self._failures - 1))
        self._next = self._clock() + pause
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
