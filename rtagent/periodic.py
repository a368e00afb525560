"""The periodic audit loop: small, injected clock, instant stop, unkillable
by a failing tick.

The next run is scheduled from the *end* of the previous one, so a slow tick
never causes a burst of catch-up runs. Waiting is done on an Event, so
``stop()`` wakes the loop at once instead of after the interval.
"""

import logging
import threading
import time

from rtagent import exception

LOG = logging.getLogger(__name__)


class PeriodicLoop:
    """Run ``task()`` now, then every ``interval`` seconds until stopped.

    :param task: callable with no arguments.
    :param interval: seconds between the end of a run and the next start.
    :param wait: callable(event, seconds) that blocks until the event is set
        or the time passes; tests inject a scripted one.
    """

    def __init__(self, task, interval, wait=None, clock=time.monotonic):
        self._task = task
        self._interval = interval
        self._wait = wait or (lambda event, seconds: event.wait(seconds))
        self._clock = clock
        self._stop = threading.Event()
        self.runs = 0
        self.failures = 0
        self.last_error = None

    def run(self):
        """Loop in the calling thread until :meth:`stop`."""
        while not self._stop.is_set():
            self.run_once()
            if self._stop.is_set():
                break
            self._wait(self._stop, self._interval)

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

    @property
    def stopped(self):
        return self._stop.is_set()
