"""The service around an agent: the audit loop, RPC, notifications, health
and metrics, systemd notify, and what signals ask for.

Start-up order: health endpoint (answers 503 "starting") -> a random
start-up delay -> the first audit (so a claim never meets a node that was
never read) -> RPC server consuming (a failed start is retried with backoff
and reported by /healthz; READY=1 waits for it) -> notifications ->
READY=1.

Signals: a handler only records what was asked and wakes the main thread
(:mod:`rtagent.service.wakeup`); every wait of the main thread is a wait on that
wake-up, after which ordinary code acts: the reload, the Guru Meditation
report, the shutdown. Starting RPC is :mod:`rtagent.rpc.starter`.

Shutdown (SIGTERM/SIGINT): stop taking RPC calls and wait for those in
flight, stop the loop, one final audit to flush the latest state to
Placement, then exit 0; all of it bounded by ``[daemon] shutdown_timeout``.
"""

import logging
import random
import threading
import time
import typing

from rtagent import exception
from rtagent.placement import errors as placement_errors
from rtagent.placement import prompt
from rtagent.rpc import status as statusmod
from rtagent.rpc.starter import RPCStarter
from rtagent.service.periodic import PeriodicLoop
from rtagent.service.wakeup import Wakeup

LOG = logging.getLogger(__name__)

# How far past its due time a sync may run before status stops saying the
# node is in sync. A steady tick takes milliseconds; a Placement that hangs
# makes a tick fail only after [placement] timeout per request (30 s by
# default), and until then the last outcome (a success) would be reported.
SYNC_GRACE_S = 10.0


class ServedAgent(typing.Protocol):
    """What the daemon and its runner (:mod:`rtagent.cmd.run`) ask of the
    agent they serve: :class:`rtagent.agent.Agent` is one."""

    nodes: typing.Any  # a rtagent.tracker.nodes.Nodes
    tracker: typing.Any  # the primary node's rtagent.tracker.tracker.Tracker

    def audit(self) -> None:
        """Read the host, record it, sync Placement (the audit thread)."""

    def sync_changed(self, node_uuids) -> dict:
        """Sync those nodes to Placement now (the prompt sync)."""

    def retry_in(self) -> float | None:
        """Seconds until a failed sync's retry, or None (any thread)."""

    def sync_status(self) -> dict:
        """node UUID -> its Placement sync state (any thread)."""

    def unknown_consumers(self) -> dict:
        """node UUID -> {consumer: allocations} reported unknown."""

    def reload_provider_config(self, conf) -> None:
        """Re-read provider config files at the next audit (SIGHUP)."""

    def invalidate_placement_cache(self) -> None:
        """Forget the cached Placement views at the next audit (SIGHUP)."""


class Daemon:
    """:param conf: the loaded, validated ConfigOpts.
    :param agent: the :class:`ServedAgent` (an :class:`rtagent.agent.Agent`).
    :param metrics: a :class:`rtagent.service.prometheus.Metrics` (its Placement
        observer must already be wired into the agent); the daemon has it
        export the nodes' state and its own sync state.
    :param trigger: the :class:`rtagent.service.periodic.Trigger` that event
        sources (the hypervisor driver) pull for an early audit.
    :param make_rpc: callable(endpoint) -> an object with start()/stop(),
        or None for no RPC (tests of the loop).
    :param make_endpoint: callable(on_call, on_change, status_of) -> endpoint.
    :param notifications: a :class:`rtagent.rpc.notifications.Notifications`, or None.
    :param health: callable(check, status) -> an object with start()/stop()
        and ``port``, or None when the endpoint is off.
    :param notifier: a :class:`rtagent.service.systemd.Notifier`.
    :param reload: callable() -> a new validated ConfigOpts, raising an
        RtagentError or oslo.config error when it is unusable.
    :param apply_conf: callable(new_conf) applying what may change at run time.
    :param store: the :class:`rtagent.tracker.store.Store`, whose failing
        durable writes make the agent unhealthy; or None.
    :param report: callable() writing a diagnostic report (SIGUSR2: the
        Guru Meditation Report), run by the main thread; or None.
    :param wakeup: the :class:`rtagent.service.wakeup.Wakeup` signal handlers use
        (a new one if None); closed with the daemon.
    """

    def __init__(
        self,
        conf,
        agent,
        *,
        metrics,
        notifier,
        make_rpc=None,
        make_endpoint=None,
        notifications=None,
        health=None,
        reload=None,
        apply_conf=None,
        store=None,
        report=None,
        trigger=None,
        wakeup=None,
        rng=random.random,
        clock=time.monotonic,
        wall=time.time,
    ):
        self.conf = conf
        self.agent = agent
        self.metrics = metrics
        self.notifier = notifier
        self._make_endpoint = make_endpoint
        self.notifications = notifications
        self._make_health = health
        self._reload = reload
        self._apply_conf = apply_conf
        self._store = store
        self._report = report
        self._rng = rng
        self._clock = clock
        self._wall = wall
        # Set by the main thread only (other threads wait on it).
        self._stop = threading.Event()
        self.wakeup = wakeup or Wakeup()
        self._rpc = (
            RPCStarter(make_rpc, self.wakeup.poke, rng=rng, clock=clock)
            if make_rpc is not None
            else None
        )
        # Local changes reach Placement within a second, not at the next
        # audit (see rtagent.placement.prompt).
        self.prompt = prompt.PromptSync(agent.sync_changed)
        self.loop = PeriodicLoop(
            self._tick,
            conf.rtagent.audit_interval,
            # A burst of host events costs one audit, run within a second.
            debounce=prompt.SPACING_S,
            jitter=conf.daemon.audit_jitter,
            rng=rng,
            trigger=trigger,
            # A failed sync's retry is not held back to the next audit.
            due_in=agent.retry_in,
        )
        self.rpc = None
        self._ready = False
        self.health = None
        self._loop_thread = None
        self._ping_period = None
        self._last_ping = None
        self._last_status = None
        # The last audit, for health, status and metrics.
        self._tick_started = None
        self._last_success = None
        self._last_error = None
        self._failures = 0
        self.reloads = 0
        self.reload_failures = 0
        metrics.watch(agent.nodes.trackers, self._metrics_state)

    # -- requests (safe in signal handlers and from any thread) -------------

    def request_stop(self, signum=0):
        """Ask the main thread to shut down (SIGTERM, SIGINT)."""
        self.wakeup.request_stop(signum)

    def close(self):
        """Close the wake-up pipe (after :meth:`run`, signals restored)."""
        self.wakeup.close()

    # -- the audit tick ----------------------------------------------------

    def _tick(self):
        self._tick_started = self._clock()
        code = None
        try:
            self.agent.audit()
        except Exception as exc:
            code = _failure_code(exc)
            self._last_error = f"{getattr(exc, 'code', type(exc).__name__)}: {exc}"
            self._failures += 1
            raise
        else:
            self._last_success = self._wall()
            self._last_error = None
            self._failures = 0
        finally:
            seconds = self._clock() - self._tick_started
            self._tick_started = None
            self.metrics.record_audit(code, seconds)
            if self.notifications is not None:
                self.notifications.poke()

    def sync_state(self):
        """The last audit's outcome (what status and health report).
        ``in_sync`` is false once a sync is overdue (:meth:`sync_overdue`),
        even while the last outcome was a success."""
        overdue = self.sync_overdue()
        return {
            "in_sync": self._last_error is None and self._last_success is not None and not overdue,
            "overdue": overdue,
            "last_success": self._last_success,
            "last_error": self._last_error,
            "failures": self._failures,
            "audits": self.loop.runs,
            "unknown_consumers": {
                node: len(found) for node, found in self.agent.unknown_consumers().items()
            },
            "healing_backlog": {
                node: state["healing_backlog"] for node, state in self.agent.sync_status().items()
            },
        }

    def _metrics_state(self):
        """The nodes' sync state as the metrics export it, per node."""
        nodes = self.agent.sync_status()
        return {
            "node_last_success": {node: state["last_success"] for node, state in nodes.items()},
            "unknown_consumers": {
                node: len(found) for node, found in self.agent.unknown_consumers().items()
            },
            "healing_backlog": {node: state["healing_backlog"] for node, state in nodes.items()},
        }

    def sync_overdue(self):
        """True when the next sync should have finished by now: no audit
        succeeded for ``audit_interval * (1 + audit_jitter)`` plus
        :data:`SYNC_GRACE_S` seconds, or the audit under way has run for
        more than :data:`SYNC_GRACE_S`. False before the first audit (not
        in sync for another reason)."""
        started = self._tick_started
        if started is not None and self._clock() - started > SYNC_GRACE_S:
            return True
        if self._last_success is None:
            return False
        due = self.conf.rtagent.audit_interval * (1 + self.conf.daemon.audit_jitter)
        return self._wall() - self._last_success > due + SYNC_GRACE_S

    # -- health ----------------------------------------------------------

    def problems(self):
        """Why the agent is unhealthy now (empty list: healthy)."""
        reasons = []
        if self.loop.runs == 0:
            reasons.append("starting: no audit completed yet")
        if self._loop_thread is not None and not self._loop_thread.is_alive():
            if not self._stop.is_set():
                reasons.append("the audit loop is not running")
        if self._stalled():
            reasons.append("an audit has been running for too long")
        if self._last_error is not None:
            # Placement unreachable, the hypervisor gone, a failing sync.
            reasons.append(f"last audit failed: {self._last_error}")
        else:
            stale = self.conf.health.sync_stale_after
            if self._last_success is not None and self._wall() - self._last_success > stale:
                reasons.append(f"no successful audit for more than {stale:.0f} s")
        rpc = self._rpc_problem()
        if rpc is not None:
            reasons.append(rpc)
        failure = self._store.write_failure if self._store is not None else None
        if failure is not None:
            # Claims are refused while durable writes fail (a full disk).
            reasons.append(f"state store: the last durable write failed: {failure}")
        for tracker in self.agent.nodes.trackers():
            snap = tracker.snapshot()
            if snap.unavailable:
                reasons.append(f"node {snap.node_uuid}: {snap.unavailable}")
            pool = getattr(snap.host, "disk_pool", None) if snap.host is not None else None
            if pool is not None and pool.stale_since is not None:
                reasons.append(
                    f"node {snap.node_uuid}: the RBD pool {pool.pool} reading is stale since "
                    f"{_iso(pool.stale_since)} ({pool.error}); its last figures stay in force"
                )
        return reasons

    def _rpc_problem(self):
        return None if self._rpc is None else self._rpc.problem(audited=self.loop.runs > 0)

    def rpc_state(self):
        """The RPC server's start-up state (what status reports)."""
        return {"enabled": False} if self._rpc is None else self._rpc.state()

    def _stalled(self):
        started = self._tick_started
        return started is not None and self._clock() - started > self.conf.daemon.watchdog_stall

    def node_sync(self, node_uuid):
        """The audit outcome, with the node's Placement sync health
        (backoff, last success)."""
        state = self.sync_state()
        state["placement"] = self.agent.sync_status().get(node_uuid)
        return state

    def status(self):
        problems = self.problems()
        return {
            "host": self.conf.host,
            "healthy": not problems,
            "problems": problems,
            "rpc": self.rpc_state(),
            "nodes": [
                statusmod.node_status(t.snapshot(), self.node_sync(t.node_uuid))
                for t in self.agent.nodes.trackers()
            ],
        }

    def summary(self):
        """One line for systemd's STATUS=."""
        snap = self.agent.tracker.snapshot()
        state = "in sync" if self._last_error is None else f"failing ({self._last_error})"
        return (
            f"{len(snap.instances)} instance(s) on {snap.hypervisor_hostname or 'unknown'}; "
            f"{self.loop.runs} audit(s), last {state}"
        )[:200]

    # -- run ---------------------------------------------------------------

    def run(self):
        """Run until :meth:`request_stop`; returns the exit status (0)."""
        self.notifier.status("starting")
        ping = self.notifier.watchdog_interval
        self._ping_period = min(1.0, ping) if ping else None
        if self._make_health is not None:
            self.health = self._make_health(self.problems, self.status)
            self.health.start()
        self._loop_thread = threading.Thread(target=self._run_loop, name="audit-loop", daemon=True)
        self._loop_thread.start()
        # The first audit (after the start-up delay) before taking calls.
        while self.loop.runs == 0 and not self._stop.is_set() and self._loop_thread.is_alive():
            self._idle(0.05)
        if not self._stop.is_set():
            self._start_serving()
        if not self._stop.is_set():
            self._ready = True
            self.notifier.ready(self.summary())
            LOG.info("rtagent ready: %s", self.summary())
        while not self._stop.is_set():
            self._idle(1.0)
        return self._shutdown()

    def _run_loop(self):
        try:
            delay = self.conf.daemon.startup_delay * self._rng()
            if delay > 0:
                LOG.info("Waiting %.1f s before the first audit (startup_delay)", delay)
                if self._stop.wait(delay):
                    return
            self.loop.run()
        finally:
            self.wakeup.poke()  # the main thread may be waiting for this thread

    # -- the main thread's waits -------------------------------------------

    def _wait(self, seconds):
        """Block until woken or ``seconds`` pass, then do what handlers and
        other threads asked for, in ordinary code."""
        asked = self.wakeup.wait(seconds)
        if asked.stop is not None and not self._stop.is_set():
            if asked.stop:
                LOG.info("Signal %d received, stopping", asked.stop)
            else:
                LOG.info("Stop requested")
            self._stop.set()
        if asked.reload:
            if self._stop.is_set():
                LOG.debug("SIGHUP received while stopping: not reloading")
            else:
                self._handle_reload()
        if asked.report:
            self._write_report()

    def _idle(self, seconds):
        """:meth:`_wait`, then ping the watchdog and refresh systemd's STATUS=."""
        self._wait(seconds)
        if self._stop.is_set():
            return
        now = self._clock()
        if (
            self._ping_period is not None
            and (self._last_ping is None or now - self._last_ping >= self._ping_period)
            and self._loop_thread.is_alive()
            and not self._stalled()
        ):
            self.notifier.watchdog()
            self._last_ping = now
        line = self.summary() if self._ready else self._starting_line()
        if line != self._last_status:
            self.notifier.status(line)
            self._last_status = line

    def _starting_line(self):
        rpc = self._rpc_problem()
        if rpc is not None:
            return f"starting: {rpc}"[:200]
        return "starting"

    def _join(self, thread, seconds):
        """Wait up to ``seconds`` for ``thread`` (which pokes when done),
        still acting on requests (a report during a slow shutdown)."""
        deadline = self._clock() + max(0.0, seconds)
        while thread.is_alive():
            left = deadline - self._clock()
            if left <= 0:
                return False
            self._wait(min(1.0, left))
        return True

    # -- RPC ---------------------------------------------------------------

    def _start_serving(self):
        self.prompt.start()
        if self._rpc is not None and not self._start_rpc():
            return
        if self.notifications is not None:
            self.notifications.start()

    def _start_rpc(self):
        """Start the RPC server; retry with backoff until it consumes or a
        stop is asked, acting on signals meanwhile. :returns: True once it
        is serving."""
        endpoint = self._make_endpoint(
            on_call=self.metrics.record_rpc,
            on_change=self._changed,
            status_of=lambda tracker: statusmod.node_status(
                tracker.snapshot(), self.node_sync(tracker.node_uuid)
            ),
        )
        starter = self._rpc
        while not self._stop.is_set():
            starter.begin(endpoint)
            while starter.connecting and not self._stop.is_set():
                self._idle(1.0)
            if starter.connecting:
                return False  # stopping while connecting (see _shutdown)
            if starter.collect():
                self.rpc = starter.server
                return True
            while not self._stop.is_set() and starter.retry_in():
                self._idle(min(1.0, starter.retry_in()))
        return False

    def _changed(self, node_uuid):
        """An RPC call changed ``node_uuid``'s accounting: tell Placement
        and the message bus soon. Never blocks."""
        self.prompt.request(node_uuid)
        if self.notifications is not None:
            self.notifications.poke(node_uuid)

    # -- what signals ask for ------------------------------------------------

    def _handle_reload(self):
        if self._reload is None:
            LOG.warning("SIGHUP received: nothing to reload")
            return
        LOG.info("SIGHUP received: reloading the configuration")
        try:
            new_conf = self._reload()
            self._apply_conf(new_conf)
        except Exception as exc:
            reason = getattr(exc, "msg", None) or exc
        else:
            reason = None
        if reason is not None:
            # Logged outside the except block: oslo.log appends the
            # exception in flight to an error line, which said it twice.
            self.reload_failures += 1
            LOG.error(
                "Configuration reload rejected, the running configuration is kept: %s", reason
            )
            return
        self.reloads += 1
        LOG.info("Configuration reloaded; an audit follows to apply it")
        self.loop.trigger()

    def _write_report(self):
        if self._report is None:
            LOG.warning("SIGUSR2 received: no report is configured")
            return
        try:
            self._report()
        except Exception:
            LOG.exception("The diagnostic report failed")

    # -- shutdown ----------------------------------------------------------

    def _shutdown(self):
        bound = self.conf.daemon.shutdown_timeout
        deadline = self._clock() + bound
        self.notifier.stopping("stopping: finishing calls in flight")
        LOG.info("Stopping: no new RPC calls; finishing those in flight")
        if self.rpc is None and self._rpc is not None and self._rpc.thread is not None:
            # A start still connecting: give it a moment, so that a server
            # it starts is stopped here rather than cut off at exit.
            self._join(self._rpc.thread, min(2.0, deadline - self._clock()))
            self.rpc = self._rpc.abandon()
        if self.rpc is not None:
            self._bounded(self.rpc.stop, deadline - self._clock(), "RPC server stop")
        self.loop.stop()
        if self._loop_thread is not None:
            self._join(self._loop_thread, deadline - self._clock())
        # Stopped before the final flush, which syncs every node once more.
        self.prompt.stop(timeout=max(0.1, min(5.0, deadline - self._clock())))
        if self.notifications is not None:
            # Stopped before the final flush publishes once more: the
            # notifications's state is not shared between two threads.
            self.notifications.stop(timeout=max(0.1, min(5.0, deadline - self._clock())))
        if self.loop.runs and not self._loop_thread.is_alive():
            # The last word to Placement: whatever the final calls changed.
            # (Not while a stuck tick still runs: a sync is single-threaded.)
            self._bounded(self._final_flush, deadline - self._clock(), "final flush")
        if self.health is not None:
            self.health.stop()
        LOG.info("Stopped after %d audit(s), %d failed", self.loop.runs, self.loop.failures)
        return 0

    def _final_flush(self):
        try:
            self.agent.audit()
        except exception.RtagentError as exc:
            LOG.warning("Final flush failed (%s): %s", exc.code, exc)
        if self.notifications is not None:
            self.notifications.send_once()

    def _bounded(self, func, seconds, what):
        """Run ``func`` in a thread; give up waiting after ``seconds``."""

        def run():
            try:
                func()
            finally:
                self.wakeup.poke()

        worker = threading.Thread(target=run, name=what, daemon=True)
        worker.start()
        if not self._join(worker, seconds):
            LOG.warning("%s did not finish within the shutdown timeout; exiting anyway", what)


def _failure_code(exc):
    """The code a failed audit is counted under (``rtagent_audits_total``).

    A node whose sync backs off sent nothing this tick, but it is still out
    of sync for the reason it backs off from: that failure's code, which
    the backoff recorded as ``"code: message"`` (SyncStatus.last_error).
    Counting ``placement.sync_backing_off`` instead hid the cause.
    """
    code = getattr(exc, "code", None) or type(exc).__name__
    if code == placement_errors.SyncBackingOff.code:
        cause = str(exc.kwargs.get("last_error") or "").split(":", 1)[0].strip()
        code = cause or code
    return code


def _iso(wall):
    """Wall-clock seconds as UTC ISO 8601, for health reasons."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))
