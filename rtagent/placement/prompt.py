"""The prompt sync: Placement right within a second of a local change.

The periodic audit reads the host and syncs every node; between two audits
(60 s by default) a claim, a move step, an attach or detach, a release or
a disable would otherwise reach Placement only at the next one. In that
window a scheduler reading Placement can hand out a device twice, or a
freed one-time-use device again. So every such change asks for a sync of
its node here, and a thread of its own runs it soon, coalesced:

- the first request after a quiet spell waits :data:`GATHER_S`, so the
  rest of its burst (a build makes several calls) joins it;
- no sync starts within :data:`SPACING_S` of the previous one's start, so
  a burst of any size costs about one sync per half second, and a
  request waits at most one spacing plus one sync;
- a request that arrives during a sync is served by the next one.

Asking never blocks on the sync (one short mutex around a set), so claims
never wait for Placement. The sync itself is the caller's
(``Agent.sync_changed``: the node's tree and allocation passes, without
reading the host); it is serialised with the audit's publishing by the
agent, and a failure is the node's sync failure as at an audit (logged,
backed off, retried by the audit loop). The periodic audit stays the
safety net for anything a request missed.
"""

import logging
import threading
import time

LOG = logging.getLogger(__name__)

# Seconds a first request waits for the rest of its burst.
GATHER_S = 0.1
# Seconds between the starts of two syncs.
SPACING_S = 0.5
# Every node (a request that names none).
ALL = None
# The syncing thread's name (logs, thread dumps, tests).
THREAD_NAME = "prompt-sync"


class PromptSync:
    """Runs ``sync(node_uuids)`` soon after :meth:`request`, coalesced.

    :param sync: callable(frozenset of node UUIDs, or None for every node).
    :param gather: seconds a first request waits for its burst.
    :param spacing: minimum seconds between two syncs' starts.
    """

    def __init__(self, sync, *, gather=GATHER_S, spacing=SPACING_S, clock=time.monotonic):
        self._sync = sync
        self._gather = gather
        self._spacing = spacing
        self._clock = clock
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._pending = set()
        self._everything = False
        self._first = None  # when the oldest pending request arrived
        self._last_start = None
        self._running = False
        self._thread = None
        self.syncs = 0  # syncs run (for tests, benchmarks and metrics)
        self.failures = 0

    def request(self, node_uuid=ALL):
        """Ask for a sync of ``node_uuid`` (every node if None) soon. Safe
        from any thread; never waits for a sync."""
        with self._mutex:
            if node_uuid is ALL:
                self._everything = True
            else:
                self._pending.add(node_uuid)
            if self._first is None:
                self._first = self._clock()
        self._wake.set()

    def start(self):
        """Start the syncing thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()

    def stop(self, timeout=5.0):
        """Stop the thread, waiting up to ``timeout`` for a sync under way.
        Requests still pending are left to the caller's final sync (the
        daemon's final flush) or the next audit. :returns: True if the
        thread ended."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def idle(self):
        """True when no request waits and no sync runs (tests, benchmarks)."""
        with self._mutex:
            return not (self._pending or self._everything or self._running)

    def run_pending(self):
        """Run the sync the pending requests ask for, now, in the calling
        thread (tests; and whoever must not wait). :returns: True if there
        was one."""
        with self._mutex:
            nodes, everything = frozenset(self._pending), self._everything
            self._pending, self._everything, self._first = set(), False, None
            if not nodes and not everything:
                return False
            self._running = True
        self._last_start = self._clock()
        self.syncs += 1
        try:
            self._sync(None if everything else nodes)
        except Exception:
            # The sync reports a node's failure itself; this is a bug.
            self.failures += 1
            LOG.exception("Prompt sync failed unexpectedly; the next audit syncs")
        finally:
            with self._mutex:
                self._running = False
        return True

    def _run(self):
        while not self._stop.is_set():
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            with self._mutex:
                first = self._first
            if first is None:
                continue
            start = first + self._gather
            if self._last_start is not None:
                start = max(start, self._last_start + self._spacing)
            delay = start - self._clock()
            if delay > 0 and self._stop.wait(delay):
                return
            self.run_pending()
