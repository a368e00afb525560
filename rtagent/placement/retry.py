"""The one retry policy for Placement generation conflicts.

An immutable value: how many attempts, and the jittered pause between them
("full jitter": uniform in [0, min(cap, base x 2^n)]), so that many agents
that conflict together do not retry together. Exhaustion raises; it never
returns a flag for the caller to forget to check.
"""

import dataclasses
import random
import time


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """:param max_attempts: total attempts, the first one included.
    :param base_delay: seconds; upper bound of the first pause.
    :param max_delay: seconds; cap of any pause.
    """

    max_attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 5.0

    def __post_init__(self):
        if self.max_attempts < 1 or self.base_delay < 0 or self.max_delay < 0:
            raise ValueError(f"invalid retry policy {self}")

    def delay(self, attempt, rng=random.random):
        """Pause (seconds) after failed attempt number ``attempt`` (1-based)."""
        return rng() * min(self.max_delay, self.base_delay * 2 ** (attempt - 1))

    def call(
        self, fn, retry_on, *, on_retry=None, exhausted=None, sleep=time.sleep, rng=random.random
    ):
        """Run ``fn(attempt)`` until it returns or attempts run out.

        :param retry_on: exception class(es) worth another attempt.
        :param on_retry: callable(exc, attempt) before each pause (to forget
            stale state, to log, to count).
        :param exhausted: callable(exc, attempts) returning the exception to
            raise when attempts run out; default re-raises the last one.
        """
        for attempt in range(1, self.max_attempts + 1):
            try:
                return fn(attempt)
            except retry_on as exc:
                if attempt == self.max_attempts:
                    if exhausted is None:
                        raise
                    raise exhausted(exc, attempt) from exc
                if on_retry is not None:
                    on_retry(exc, attempt)
                sleep(self.delay(attempt, rng))
        raise AssertionError("unreachable: max_attempts >= 1")
