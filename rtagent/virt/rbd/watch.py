"""The pool's last good figures, read at each audit in bounded time.

A reading runs in a thread of its own and the audit waits for it at most
``timeout`` seconds: librados bounds its own waits too, but a cluster that
accepts a connection and never answers must not hold the audit (and so
the next claims' host view) for minutes. While a reading hangs no second
one starts; its result, when it comes, is used by the next audit. When a
reading fails or times out, the last good figures stay in force and the
reading is *stale* from the first failure on: status and health say so
with that time, and what is published does not change until the cluster
answers again.
"""

import dataclasses
import logging
import threading
import time

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Reading:
    """What an audit knows of the pool.

    :param figures: the last good :class:`~.figures.PoolFigures`, or None
        when the pool was never read since the agent started.
    :param read_at: wall-clock time of those figures.
    :param stale_since: wall-clock time of the first failed reading since
        the last good one; None while fresh.
    :param error: why the last reading failed, or None.
    """

    figures: object = None
    read_at: float | None = None
    stale_since: float | None = None
    error: str | None = None


class PoolWatch:
    """Reads the pool through ``read`` (callable() -> PoolFigures, raising
    on failure), at most ``timeout`` seconds per :meth:`read`.

    :param wall: callable() -> wall-clock seconds (injected by tests).
    """

    def __init__(self, read, timeout, wall=time.time):
        self._read = read
        self._timeout = timeout
        self._wall = wall
        self._lock = threading.Lock()
        self._reading = Reading()
        self._pending = None  # the thread of a reading still under way

    def read(self):
        """Read the pool now, bounded; :returns: the :class:`Reading`."""
        with self._lock:
            pending = self._pending
            if pending is None or not pending.is_alive():
                pending = threading.Thread(target=self._run, name="rbd-pool-read", daemon=True)
                self._pending = pending
                pending.start()
        pending.join(self._timeout)
        if pending.is_alive():
            self._failed(f"no answer from the cluster within {self._timeout:g} s")
        with self._lock:
            return self._reading

    @property
    def reading(self):
        """The last :class:`Reading`, without reading."""
        with self._lock:
            return self._reading

    def _run(self):
        try:
            found = self._read()
        except Exception as exc:  # any failure leaves the last figures in force
            self._failed(str(exc) or type(exc).__name__)
            return
        with self._lock:
            if self._reading.stale_since is not None:
                LOG.info("RBD pool %s answers again", found.pool)
            self._reading = Reading(figures=found, read_at=self._wall())

    def _failed(self, reason):
        with self._lock:
            old = self._reading
            since = old.stale_since if old.stale_since is not None else self._wall()
            # Once per outage: a reading the audit gave up on may fail again
            # later, in librados' words.
            if old.stale_since is None:
                LOG.warning(
                    "RBD pool reading failed (%s); %s",
                    reason,
                    "the last figures stay in force" if old.figures else "never read yet",
                )
            self._reading = dataclasses.replace(old, stale_since=since, error=reason)
