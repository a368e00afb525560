"""Starting the RPC server until it consumes, with backoff, and saying why not.

oslo.messaging marks a server started before it connects, and a start that
failed (a wrong password: ACCESS_REFUSED) never starts again, so each
attempt builds a fresh server, in a thread of its own: connecting blocks
while the broker is unreachable, and the main thread must stay free to act
on signals meanwhile. A failure is logged once per cause (passwords in URLs
masked) and retried after a jittered, doubling pause.
"""

import logging
import random
import re
import threading
import time

import tenacity

from rtagent.pauses import FullJitter, pause

LOG = logging.getLogger(__name__)

# A failed start is retried after min(cap, base x 2^(attempts-1)) seconds
# times a random factor in [0.5, 1]: half of the doubling pause fixed, half
# drawn at random ("equal jitter").
RETRY_BASE = 1.0
RETRY_CAP = 30.0


def backoff(rng=random.random):
    """The pauses between attempts, as a tenacity wait strategy.

    The daemon's main thread waits them out (between its calls to
    :meth:`RPCStarter.begin`), not a tenacity loop: meanwhile it acts on
    signals, pings the watchdog and reports :meth:`RPCStarter.retry_in`."""
    half = tenacity.wait_exponential(multiplier=RETRY_BASE / 2, max=RETRY_CAP / 2)
    return half + FullJitter(RETRY_BASE / 2, RETRY_CAP / 2, rng)


# user:password@ in a (multi-host) URL an error message might quote.
_CREDENTIALS = re.compile(r"(?:(?<=//)|(?<=,))([^:/@,\s]*):[^@/,\s]*@")


def scrub(text):
    """``text`` without URL passwords."""
    return _CREDENTIALS.sub(r"\1:***@", text)


class RPCStarter:
    """Attempts to start an RPC server, one at a time.

    :param make_rpc: callable(endpoint) -> an object with start()/stop().
    :param on_done: callable() when an attempt ends (wakes the main thread).
    """

    def __init__(self, make_rpc, on_done, rng=random.random, clock=time.monotonic):
        self._make_rpc = make_rpc
        self._on_done = on_done
        self._wait = backoff(rng)
        self._clock = clock
        self.server = None
        self.attempts = 0
        self.last_error = None
        self._retry_at = None
        self._thread = None
        self._outcome = {}
        # Set at shutdown: an attempt that connects afterwards stops its
        # own server instead of serving calls nobody will finish.
        self._mutex = threading.Lock()
        self._abandoned = False

    def begin(self, endpoint):
        """Start one attempt in its own thread."""
        self.attempts += 1
        outcome = self._outcome = {}
        self._thread = threading.Thread(
            target=self._attempt, args=(endpoint, outcome), name="rpc-start", daemon=True
        )
        self._thread.start()

    @property
    def thread(self):
        """The thread of the current attempt, or None."""
        return self._thread

    @property
    def connecting(self):
        return self._thread is not None and self._thread.is_alive()

    def _attempt(self, endpoint, outcome):
        try:
            rpc = self._make_rpc(endpoint)
            rpc.start()
            with self._mutex:
                late = self._abandoned
                if not late:
                    outcome["rpc"] = rpc
            if late:
                LOG.info("RPC server connected after shutdown began: stopping it")
                rpc.stop()
        except Exception as exc:
            outcome["error"] = exc
        finally:
            self._on_done()

    def collect(self):
        """The finished attempt's outcome. :returns: True if the server runs
        (``server``); else the failure is recorded and the retry scheduled."""
        if "error" not in self._outcome:
            self.server = self._outcome.get("rpc")
            if self.last_error is not None:
                LOG.info("RPC server started after %d attempts", self.attempts)
            self.last_error = self._retry_at = None
            return self.server is not None
        cause = scrub(f"{type(self._outcome['error']).__name__}: {self._outcome['error']}")
        delay = pause(self._wait, self.attempts)
        self._retry_at = self._clock() + delay
        if cause != self.last_error:
            # Once per cause, not once per attempt.
            LOG.error(
                "RPC server did not start (%s); not ready until it does. Retrying with "
                "backoff: next attempt in %.1f s, then at most every %.0f s",
                cause.rstrip(". "),
                delay,
                RETRY_CAP,
            )
        self.last_error = cause
        return False

    def retry_in(self):
        """Seconds until the next attempt is due (0: now), or None."""
        if self.server is not None or self._retry_at is None:
            return None
        return max(0.0, self._retry_at - self._clock())

    def abandon(self):
        """Shutdown: no more attempts. :returns: a server the current
        attempt has started (for the caller to stop), or None; an attempt
        that connects from now on stops its server itself."""
        with self._mutex:
            self._abandoned = True
            return self._outcome.get("rpc")

    def problem(self, audited):
        """Why RPC is not serving (for health), or None.

        :param audited: the first audit completed (before it, not serving
            yet is normal start-up).
        """
        if self.server is not None:
            return None
        if self.last_error is not None:
            return (
                f"RPC server not running: {self.last_error} "
                f"({self.attempts} attempt(s); retrying with backoff)"
            )
        if audited:
            return "RPC server not running: connecting to the message broker"
        return None

    def state(self):
        """What status reports of the RPC server's start."""
        retry_in = self.retry_in()
        return {
            "enabled": True,
            "running": self.server is not None,
            "attempts": self.attempts,
            "last_error": self.last_error,
            "retry_in": None if retry_in is None else round(retry_in, 1),
        }
