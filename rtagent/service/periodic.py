"""The periodic audit loop: small, injected clock, instant stop, unkillable
by a failing tick.

The next run is scheduled from the *end* of the previous one, so a slow tick
never causes a burst of catch-up runs. Waiting is done on an Event, so
``stop()`` wakes the loop at once instead of after the interval.

``trigger()`` asks for an early run (a hypervisor lifecycle event, say);
so does a :class:`Trigger` made before the loop and handed to it, which lets
an event source hold the trigger from its own construction. It is
debounced: the loop wakes, waits ``debounce`` seconds more so that a burst
of events (a guest booting sends several) costs one run, then runs.
A trigger that arrives during a run causes one more run after it.

``due_in`` lets the task ask for its next run sooner than the interval (a
failed sync whose retry is due before the next audit): the loop waits for
whichever comes first. No debounce: it is a time, not a burst of events.
"""

import logging
import random
import threading
import time

from rtagent import exception

LOG = logging.getLogger(__name__)


class Trigger:
    """A request for an early run of the loop it is given to."""

    def __init__(self):
        self.requested = threading.Event()
        # What the loop's wait returns early on (stop() sets it too).
        self.wake = threading.Event()

    def pull(self):
        """Ask for an early run (debounced). Safe from any thread, never blocks."""
        self.requested.set()
        self.wake.set()


class PeriodicLoop:
    """Run ``task()`` now, then every ``interval`` seconds until stopped.

    :param task: callable with no arguments.
    :param interval: seconds between the end of a run and the next start.
    :param wait: callable(event, seconds) that blocks until the event is set
        or the time passes; tests inject a scripted one. The event is set by
        :meth:`stop` and by :meth:`trigger`.
    :param debounce: seconds to wait after a trigger before the early run.
    :param jitter: each interval is multiplied by a random factor in
        [1 - jitter, 1 + jitter], so agents started together drift apart.
    :param rng: random() source for the jitter; tests pin it.
    :param trigger: the :class:`Trigger` that asks for early runs (a new
        one if None).
    :param due_in: callable() -> seconds until the task wants to run again,
        or None; honoured when sooner than the interval and positive.
    """

    def __init__(
        self,
        task,
        interval,
        wait=None,
        clock=time.monotonic,
        debounce=1.0,
        *,
        jitter=0.0,
        rng=random.random,
        trigger=None,
        due_in=None,
    ):
        self._task = task
        self._due_in = due_in
        self._interval = interval
        self._jitter = jitter
        self._rng = rng
        self._wait = wait or (lambda event, seconds: event.wait(seconds))
        self._clock = clock
        self._debounce = debounce
        self._stop = threading.Event()
        self._trigger = trigger or Trigger()
        # Set by stop() and trigger(): what the loop's wait returns early on.
        self._wake = self._trigger.wake
        self._triggered = self._trigger.requested
        self.runs = 0
        self.failures = 0
        self.triggered_runs = 0
        self.last_error = None

    def run(self):
        """Loop in the calling thread until :meth:`stop`."""
        while not self._stop.is_set():
            self.run_once()
            if self._stop.is_set():
                break
            if not self._triggered.is_set():
                self._wait(self._wake, self.next_pause())
            if self._stop.is_set():
                break
            if self._triggered.is_set():
                # Coalesce the burst: wait out the debounce, then run once.
                self._wake.clear()
                if self._debounce > 0:
                    self._wait(self._stop, self._debounce)
                self._triggered.clear()
                self.triggered_runs += 1
            self._wake.clear()

    def next_interval(self):
        """Seconds to wait before the next run, jitter applied."""
        return self._interval * (1 - self._jitter + 2 * self._jitter * self._rng())

    def next_pause(self):
        """Seconds to wait now: the jittered interval, or less when the task
        is due sooner (``due_in``)."""
        pause = self.next_interval()
        if self._due_in is not None:
            try:
                sooner = self._due_in()
            except Exception:
                LOG.exception("due_in failed; waiting the interval")
                sooner = None
            if sooner is not None and 0 < sooner < pause:
                pause = sooner
        return pause

    def trigger(self):
        """Ask for an early run (debounced). Safe from any thread, never blocks."""
        self._trigger.pull()

    def run_once(self):
        """One guarded run: errors are logged and counted, never raised."""
        started = self._clock()
        error = None
        try:
            self._task()
        except exception.RtagentError as exc:
            error = exc
        except Exception as exc:
            # A bug, not a condition: keep the traceback for the report.
            LOG.exception("Audit failed unexpectedly; the loop continues")
            error = exc
        self.last_error = error
        self.runs += 1  # completed runs, so a waiter sees whole ticks
        if error is None:
            LOG.debug("Audit run %d took %.3f s", self.runs, self._clock() - started)
            return
        self.failures += 1
        if isinstance(error, exception.RtagentError):
            # Expected conditions (Placement down, hypervisor gone): one line,
            # logged outside the except block so no traceback is attached.
            LOG.warning("Audit failed (%s): %s", error.code, error)

    def stop(self):
        """Ask the loop to end; it wakes immediately."""
        self._stop.set()
        self._wake.set()

    @property
    def stopped(self):
        return self._stop.is_set()
