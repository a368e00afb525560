"""The one retry policy for Placement generation conflicts, on tenacity.

An immutable value: how many attempts, and the jittered pause between them
("full jitter": uniform in [0, min(cap, base x 2^(n-1))] after attempt n),
so that many agents that conflict together do not retry together.
Exhaustion raises; it never returns a flag for the caller to forget to
check. tenacity runs the attempts; the value only says how.
"""

import dataclasses
import random
import time

import tenacity

from rtagent.pauses import FullJitter, pause


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

    def wait(self, rng=random.random):
        """The pauses, as a tenacity wait strategy."""
        return FullJitter(self.base_delay, self.max_delay, rng)

    def delay(self, attempt, rng=random.random):
        """Pause (seconds) after failed attempt number ``attempt`` (1-based)."""
        return pause(self.wait(rng), attempt)

    def call(
        self, fn, retry_on, *, on_retry=None, exhausted=None, sleep=time.sleep, rng=random.random
    ):
        """Run ``fn(attempt)`` until it returns or attempts run out.

        :param retry_on: exception class(es) worth another attempt; any
            other exception propagates at once.
        :param on_retry: callable(exc, attempt) before each pause (to forget
            stale state, to log, to count); never after the last attempt.
        :param exhausted: callable(exc, attempts) returning the exception to
            raise, chained from the last one, when attempts run out; default
            re-raises the last one.
        """

        def before_sleep(state):
            on_retry(state.outcome.exception(), state.attempt_number)

        def give_up(state):
            exc = state.outcome.exception()
            raise exhausted(exc, state.attempt_number) from exc

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_attempts),
            wait=self.wait(rng),
            retry=tenacity.retry_if_exception_type(retry_on),
            before_sleep=None if on_retry is None else before_sleep,
            sleep=sleep,
            # Out of attempts: the last exception itself, or its mapping.
            reraise=True,
            retry_error_callback=None if exhausted is None else give_up,
        )
        for attempt in retrying:
            with attempt:
                result = fn(attempt.retry_state.attempt_number)
        return result
