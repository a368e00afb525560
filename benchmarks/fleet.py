"""K agents on one Placement: steady load, a Placement outage, a herd restart.

Run by ``make bench-fleet K=50`` (not by ``make bench``, not in CI).

Placement as operators run it: gunicorn worker processes over PostgreSQL
(:mod:`rtagent.testing.placement_gunicorn`). K real agents in this process
(:mod:`benchmarks.common.fleet`), each with 20 running instances whose
allocations were written as a scheduler writes them, each run by the
daemon's loop: a random start-up delay, the audit interval with jitter, the
refresh interval, the sync backoff, all production values times ``--scale``
(0.1: a 60 s audit every 6 s). Rates are per agent per *tick*: one audit
interval of wall time, 60 s in production.

Phases and figures (key=value lines, the last a summary):

- ``phase=steady`` (``--steady-ticks`` ticks after one tick of warm-up):
  Placement requests per agent-tick, reads and writes; Placement CPU per
  agent-tick (gunicorn master and workers, ``/proc/<pid>/task/*/schedstat``)
  and PostgreSQL's beside it; the agents' own CPU; the p50/p99 latency of
  the requests as the agents' client sees it (RequestObserver seconds);
  RabbitMQ messages per agent per production minute, counted at the broker
  (the agents send the daemon's notifications, instance-info sync every
  ``instance_info_interval`` scaled; ``--no-rabbit`` leaves them out).
  Targets: <= 0.2 requests per agent-tick (refresh 300 s), 0 writes.
- ``nova_reference``: nova 34.0.0's audit for the same 20 instances, from
  its per-tick formula (N+2 reads per tick, +4 every 5th: 22.8), times this
  run's Placement CPU per steady request: computed, never measured here.
- ``phase=foreign``: an operator edits one provider's allocation ratios
  through the Placement API: MEMORY_MB's, which the agents leave unset (the
  agent adopts it: seconds until its compute-node view reports it, and
  Placement still holds it at the end), and VCPU's, which they configure
  (seconds until Placement holds the configured one again). Target: both
  within the refresh interval plus one tick.
- ``phase=outage``: the gunicorn master and workers stopped (clients are
  refused) for ``--outage-s`` production seconds, then started again on the
  same port; the outage ends when every worker serves again. The app is
  preloaded (built by the master before it listens, uWSGI's default), so a
  restart refuses connections until it answers, in about 2 s; it is started
  that much early, and the real length is printed.
- ``phase=recovery``: seconds (and ticks) from the outage's end until every
  agent's last sync succeeded (target <= 2 ticks); the peak request rate of
  the recovery (the busiest one-tick window from the outage's start to
  ``--observe-ticks`` ticks after its end) over the steady rate (target
  <= 2). The busiest 10-production-second window is printed too, with the
  steady phase's own for comparison, not judged.
- ``phase=herd``: every agent stopped (its final flush), rebuilt from its
  state directory and started at once; time until all are in sync, peak
  over steady as above (target <= 2).
- ``check``: every agent's plan against Placement is empty (converged),
  every node tracks its 20 instances with no drift.

VOID: setup failed; RabbitMQ not installed (without ``--no-rabbit``); a
steady audit failed, or the steady phase saw no request (or, with RabbitMQ,
no notification) or lasted less than two refresh intervals; the operator's
edit was refused; no agent met the outage (nothing recovered); or a node
did not converge. Negative control:
``--refresh-interval 0`` (every audit reads Placement, as before issue
17's interval) must MISS the steady target.
"""

import argparse
import concurrent.futures
import contextlib
import logging
import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import fleet
from benchmarks.common.load import answered, cpu_delta, kinds, latency, peak, postgres_cpu
from benchmarks.common.verdict import run as run_benchmark
from rtagent.testing import rabbitmq
from rtagent.testing.placement_gunicorn import placement_on_postgres

INSTANCES = 20
MAX_STEADY_REQUESTS_PER_AGENT_TICK = 0.2
MAX_BURST_RATIO = 2.0
MAX_RECOVERY_TICKS = 2.0
# nova 34.0.0's audit: N+2 reads per tick, 4 more every 5th tick.
NOVA_REQUESTS_PER_TICK = INSTANCES + 2 + 4 / 5
POLL_S = 0.05
# The short window of the burst figures, in production seconds.
SHORT_WINDOW_S = 10


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=50, help="agents")
    parser.add_argument("--scale", type=float, default=0.1, help="production timing times this")
    parser.add_argument(
        "--refresh-interval",
        type=int,
        default=fleet.REFRESH_INTERVAL_S,
        help="placement_refresh_interval in production seconds; 0 is the negative "
        "control (every audit reads: must MISS)",
    )
    parser.add_argument("--steady-ticks", type=int, default=15)
    parser.add_argument("--outage-s", type=float, default=60.0, help="production seconds")
    parser.add_argument("--observe-ticks", type=int, default=3)
    parser.add_argument("--placement-workers", type=int, default=4)
    parser.add_argument(
        "--no-rabbit",
        action="store_true",
        help="no notifications (and no RabbitMQ figure); by default every agent "
        "sends the daemon's notifications to a private RabbitMQ",
    )
    return parser.parse_args(argv)


def verdict(ok):
    return "PASS" if ok else "MISS"


# -- phases --------------------------------------------------------------


def wait_in_sync(agents, start, until):
    """Poll until every agent is in sync or ``until``; :returns: seconds
    from ``start`` to the first poll that saw them all in sync, or None."""
    while True:
        now = time.monotonic()
        if all(a.in_sync for a in agents):
            return max(0.0, now - start)
        if now >= until:
            return None
        time.sleep(POLL_S)


def steady(run, k, tick):
    placement, agents, recorder = run["placement"], run["agents"], run["recorder"]
    broker = run["broker"]
    failures0 = sum(a.loop.failures for a in agents)
    cpu0, db0 = placement.cpu_by_pid(), postgres_cpu(placement.postgres)
    messages0 = broker.messages() if broker is not None else None
    own0, t0 = time.process_time(), time.monotonic()
    time.sleep(run["args"].steady_ticks * tick)
    t1 = time.monotonic()
    messages = broker.messages() - messages0 if broker is not None else None
    cpu = cpu_delta(cpu0, placement.cpu_by_pid())
    db = postgres_cpu(placement.postgres) - db0
    own = time.process_time() - own0
    records = recorder.between(t0, t1)
    done = answered(records)
    agent_ticks = k * (t1 - t0) / tick
    reads = sum(r[2] == "GET" for r in done)
    out = {
        "agent_ticks": agent_ticks,
        "requests": len(done),
        "rate": len(done) / agent_ticks,
        "reads": reads / agent_ticks,
        "writes": (len(done) - reads) / agent_ticks,
        "failed": len(records) - len(done),
        "audit_failures": sum(a.loop.failures for a in agents) - failures0,
        "cpu_ms": 1000 * cpu / agent_ticks,
        "db_cpu_ms": 1000 * db / agent_ticks,
        "cpu_ms_per_request": 1000 * (cpu + db) / max(1, len(done)),
        "agent_cpu_ms": 1000 * own / agent_ticks,
        "short_peak": peak(done, SHORT_WINDOW_S * run["scale"].factor),
        "tick_peak": peak(done, tick),
    }
    print(
        f"phase=steady k={k} ticks={(t1 - t0) / tick:.1f} requests={len(done)} "
        f"requests_per_agent_tick={out['rate']:.3f} "
        f"target_requests_per_agent_tick={MAX_STEADY_REQUESTS_PER_AGENT_TICK} "
        f"verdict={verdict(out['rate'] <= MAX_STEADY_REQUESTS_PER_AGENT_TICK)} "
        f"reads_per_agent_tick={out['reads']:.3f} writes_per_agent_tick={out['writes']:.3f} "
        f"target_writes=0 verdict={verdict(out['writes'] == 0)}"
    )
    print(
        f"phase=steady k={k} placement_cpu_ms_per_agent_tick={out['cpu_ms']:.3f} "
        f"postgres_cpu_ms_per_agent_tick={out['db_cpu_ms']:.3f} "
        f"cpu_ms_per_request={out['cpu_ms_per_request']:.2f} "
        f"agent_cpu_ms_per_agent_tick={out['agent_cpu_ms']:.3f} {latency(records)} "
        f"failed_requests={out['failed']} audit_failures={out['audit_failures']}"
    )
    if messages is not None:
        minutes = (t1 - t0) / run["scale"].factor / 60
        out["messages"] = messages / k / minutes
        print(
            f"phase=steady k={k} rabbitmq_messages={messages} "
            f"rabbitmq_messages_per_agent_minute={out['messages']:.3f} "
            f"basis=broker_queue_{fleet.Broker.QUEUE}_depth "
            f"(notifications; the agents here serve no RPC: a steady agent receives "
            f"no RPC message unless a conductor calls it)"
        )
    nova_cpu = NOVA_REQUESTS_PER_TICK * out["cpu_ms_per_request"]
    print(
        f"nova_reference k={k} instances_per_agent={INSTANCES} "
        f"requests_per_agent_tick={NOVA_REQUESTS_PER_TICK:g} "
        f"reads_per_agent_tick={NOVA_REQUESTS_PER_TICK:g} writes_per_agent_tick=0 "
        f"placement_and_postgres_cpu_ms_per_agent_tick={nova_cpu:.2f} "
        f"basis=computed_n_plus_2_plus_4_every_5th_times_this_runs_cpu_per_request"
    )
    return out


def burst(run, k, tick, start, end, name, base):
    """The busiest windows of [start, end) against the steady phase."""
    records = answered(run["recorder"].between(start, end))
    per_tick = peak(records, tick) / k
    ratio = per_tick / base["rate"] if base["rate"] else float("inf")
    short = SHORT_WINDOW_S * run["scale"].factor
    print(
        f"phase={name} k={k} requests={len(records)} "
        f"requests_per_agent={len(records) / k:.2f} "
        f"peak_tick_requests_per_agent_tick={per_tick:.3f} "
        f"steady_requests_per_agent_tick={base['rate']:.3f} burst_ratio={ratio:.2f} "
        f"target_burst_ratio={MAX_BURST_RATIO} verdict={verdict(ratio <= MAX_BURST_RATIO)} "
        f"peak_{SHORT_WINDOW_S}s_requests={peak(records, short)} "
        f"steady_peak_{SHORT_WINDOW_S}s_requests={base['short_peak']} {latency(records)}"
    )
    print(f"phase={name} k={k} request_kinds={kinds(records)}")
    return ratio


def foreign(run, k, tick):
    """An operator edits one provider's inventories through the Placement
    API, in one request: the MEMORY_MB allocation ratio (the agents leave
    ``ram_allocation_ratio`` unset, so Placement's value is theirs to adopt)
    and the VCPU one (``cpu_allocation_ratio`` is configured, so the agent
    puts its own back). Seconds until that agent's compute-node view reports
    the new memory ratio, and until Placement holds the configured VCPU
    ratio again; the memory ratio must still be the operator's at the end.
    Target: both within the refresh interval plus one tick (the audit that
    reads it)."""
    agent = run["agents"][0]
    tracker = agent.agent.nodes.get(agent.agent.nodes.primary_uuid)
    configured = agent.conf().cpu_allocation_ratio
    api = run["placement"].admin_adapter()
    url = f"/resource_providers/{tracker.node_uuid}/inventories"
    body = api.get(url).json()
    memory = body["inventories"]["MEMORY_MB"]
    ram = 1.5 if memory["allocation_ratio"] != 1.5 else 2.0
    memory["allocation_ratio"] = ram
    body["inventories"]["VCPU"]["allocation_ratio"] = 2.0
    t0 = time.monotonic()
    resp = api.put(url, json=body, raise_exc=False)
    limit = t0 + run["scale"].refresh_interval + 2 * tick
    adopted = reverted = None
    next_look = t0
    while resp.status_code == 200 and time.monotonic() < limit:
        now = time.monotonic()
        if (
            adopted is None
            and tracker.compute_node_view("127.0.0.1")["ram_allocation_ratio"] == ram
        ):
            adopted = now - t0
        if reverted is None and now >= next_look:
            # Placement itself, every half second (not every poll).
            next_look = now + 0.5
            if api.get(url).json()["inventories"]["VCPU"]["allocation_ratio"] == configured:
                reverted = time.monotonic() - t0
        if adopted is not None and reverted is not None:
            break
        time.sleep(POLL_S)
    kept = api.get(url).json()["inventories"]["MEMORY_MB"]["allocation_ratio"] == ram
    target = run["scale"].refresh_interval + tick
    ok = kept and all(t is not None and t <= target for t in (adopted, reverted))
    factor = run["scale"].factor

    def shown(seconds):
        if seconds is None:
            return "never", "never"
        return f"{seconds:.2f}", f"{seconds / factor:.0f}"

    (a_s, a_p), (r_s, r_p) = shown(adopted), shown(reverted)
    print(
        f"phase=foreign k={k} operator_put_status={resp.status_code} "
        f"memory_ratio_set={ram:g} adopted_after_s={a_s} (production {a_p}) "
        f"vcpu_ratio_set=2 configured={configured:g} restored_after_s={r_s} (production {r_p}) "
        f"target_s={target:g} (production {target / factor:.0f}) "
        f"memory_ratio_kept={kept} verdict={verdict(ok)}"
    )
    return {"status": resp.status_code, "adopted": adopted, "reverted": reverted, "ok": ok}


def outage(run, k, tick, base):
    placement, agents, recorder = run["placement"], run["agents"], run["recorder"]
    args = run["args"]
    # Refused from the halt on; the restart starts early by the time the
    # first start took, so that the first answer comes when the outage is
    # over (its real length is printed).
    t_out = time.monotonic()
    placement.halt()
    halted = time.monotonic()
    length = args.outage_s * run["scale"].factor
    time.sleep(max(0.0, t_out + length - run["start_s"] - time.monotonic()))
    t_restart = time.monotonic()
    placement.restart()
    t_back = time.monotonic()
    met = {r[1] for r in recorder.between(t_out, t_back) if r[4] is None}
    print(
        f"phase=outage k={k} outage_s={t_back - t_out:.1f} "
        f"outage_production_s={(t_back - t_out) / run['scale'].factor:.0f} "
        f"outage_ticks={(t_back - t_out) / tick:.2f} agents_that_met_it={len(met)} "
        f"refused_attempts={sum(r[4] is None for r in recorder.between(t_out, t_back))} "
        f"halt_s={halted - t_out:.1f} restart_s={t_back - t_restart:.1f}"
    )
    end = t_back + args.observe_ticks * tick
    synced = wait_in_sync(agents, t_back, end)
    time.sleep(max(0.0, end - time.monotonic()))
    ticks = None if synced is None else synced / tick
    print(
        f"phase=recovery k={k} agents_that_met_it={len(met)} "
        f"in_sync_after_s={'never' if synced is None else f'{synced:.2f}'} "
        f"in_sync_after_ticks={'never' if ticks is None else f'{ticks:.2f}'} "
        f"target_ticks={MAX_RECOVERY_TICKS} "
        f"verdict={verdict(ticks is not None and ticks <= MAX_RECOVERY_TICKS)}"
    )
    ratio = burst(run, k, tick, t_out, end, "recovery", base)
    return {"met": len(met), "ticks": ticks, "ratio": ratio}


def herd(run, k, tick, base):
    agents = run["agents"]
    for a in agents:
        a.stop(final_audit=True)
    for a in agents:
        a.build()
    t_h = time.monotonic()
    for a in agents:
        a.start()
    end = t_h + run["args"].observe_ticks * tick
    synced = wait_in_sync(agents, t_h, end)
    time.sleep(max(0.0, end - time.monotonic()))
    ticks = None if synced is None else synced / tick
    print(
        f"phase=herd k={k} in_sync_after_s={'never' if synced is None else f'{synced:.2f}'} "
        f"in_sync_after_ticks={'never' if ticks is None else f'{ticks:.2f}'}"
    )
    ratio = burst(run, k, tick, t_h, end, "herd", base)
    return {"ticks": ticks, "ratio": ratio}


# -- main ----------------------------------------------------------------


def print_header(args, scale):
    print(
        f"fleet k={args.k} instances_per_agent={INSTANCES} agent_processes=1 "
        f"scale={scale.factor} audit_interval_s={scale.audit_interval} "
        f"(production {fleet.AUDIT_INTERVAL_S}) audit_jitter={fleet.AUDIT_JITTER} "
        f"placement_refresh_interval_s={scale.refresh_interval} "
        f"(production {args.refresh_interval}) startup_delay_s={scale.startup_delay:g} "
        f"retry_window_s={scale.retry_window:g} "
        f"placement_timeout_s={fleet.PLACEMENT_TIMEOUT_S:g} (not scaled) "
        f"placement_workers={args.placement_workers} placement_db=postgresql",
        flush=True,
    )


def setup(run, k):
    """Build and place K agents, then start them spread over one refresh
    interval (a fleet not restarted at once: each reads Placement when it
    starts, so the due reads are spread; the herd phase shows what one
    restart does); then a tick more of warm-up."""
    placement = run["placement"]
    local = threading.local()

    def place(agent):
        if not hasattr(local, "api"):
            local.api = placement.admin_adapter()  # the scheduler's writes
        agent.place(local.api)

    rss0, t0 = fleet.rss_mb(), time.monotonic()
    for i in range(k):
        agent = fleet.FleetAgent(
            i, run["root"], run["scale"], run["recorder"], placement.endpoint, run["broker"]
        )
        run["agents"].append(agent)
        agent.build()
    # One scheduler per Placement worker: at K = 1,000 the 20,000
    # allocations take minutes one at a time.
    with concurrent.futures.ThreadPoolExecutor(run["args"].placement_workers) as pool:
        list(pool.map(place, run["agents"]))
    rss1 = fleet.rss_mb()
    print(
        f"setup k={k} seconds={time.monotonic() - t0:.1f} "
        f"rss_mb={rss1:.0f} rss_mb_per_agent={(rss1 - rss0) / k:.2f}",
        flush=True,
    )
    tick = run["scale"].audit_interval
    spread = max(run["scale"].refresh_interval, tick)
    for agent in run["agents"]:
        agent.agent.invalidate_placement_cache()
        agent.start(delay=random.uniform(0, spread))
    time.sleep(spread + tick)


def phases(run, k):
    """Every phase in turn: (figures, missed, void)."""
    tick = run["scale"].audit_interval
    missed, void = [], []
    base = steady(run, k, tick)
    if base["audit_failures"] or base["failed"]:
        void.append("steady_audits_failed")
    if not base["requests"]:
        void.append("steady_saw_no_request")
    if base.get("messages") == 0:
        void.append("steady_saw_no_notification")
    if run["args"].steady_ticks * tick < 2 * run["scale"].refresh_interval:
        # Each agent reads once per interval: a shorter window counts
        # where the agents' phases happen to fall, not a rate.
        void.append("steady_window_under_2_refresh_intervals")
    if base["rate"] > MAX_STEADY_REQUESTS_PER_AGENT_TICK:
        missed.append("steady")
    if base["writes"]:
        missed.append("steady_writes")
    fr = foreign(run, k, tick)
    if fr["status"] != 200:
        void.append("operator_edit_refused")
    elif not fr["ok"]:
        missed.append("foreign_ratio")
    out = outage(run, k, tick, base)
    if not out["met"]:
        void.append("no_agent_met_the_outage")
    if out["ticks"] is None or out["ticks"] > MAX_RECOVERY_TICKS:
        missed.append("recovery_in_sync")
    if out["ratio"] > MAX_BURST_RATIO:
        missed.append("recovery_burst")
    hd = herd(run, k, tick, base)
    if hd["ratio"] > MAX_BURST_RATIO:
        missed.append("herd_burst")
    print(f"memory k={k} rss_mb={fleet.rss_mb():.0f}", flush=True)
    converged, tracked, drift = fleet_check(run["agents"])
    print(f"check k={k} converged={converged}/{k} instances_tracked={tracked} drift={drift}")
    if converged < k or tracked != k * INSTANCES or drift:
        void.append("not_converged")
    return {"steady": base, "foreign": fr, "recovery": out, "herd": hd}, missed, void


def print_summary(k, figures, missed, void):
    base, out, hd = figures["steady"], figures["recovery"], figures["herd"]
    word = "VOID" if void else "MISS" if missed else "PASS"
    recovery = "never" if out["ticks"] is None else f"{out['ticks']:.2f}"
    fr = figures["foreign"]
    rabbit = f"{base['messages']:.3f}" if "messages" in base else "not_measured"
    fr_seen = " ".join(
        "never" if fr[key] is None else f"{fr[key]:.2f}" for key in ("adopted", "reverted")
    )
    print(
        f"summary k={k} steady_requests_per_agent_tick={base['rate']:.3f} "
        f"(target <= {MAX_STEADY_REQUESTS_PER_AGENT_TICK}) "
        f"steady_writes_per_agent_tick={base['writes']:.3f} (target 0) "
        f"foreign_ratio_adopted_restored_s={fr_seen.replace(' ', ',')} "
        f"(target <= refresh interval + 1 tick) "
        f"recovery_in_sync_ticks={recovery} (target <= {MAX_RECOVERY_TICKS:g}) "
        f"recovery_burst_ratio={out['ratio']:.2f} (target <= {MAX_BURST_RATIO:g}) "
        f"herd_burst_ratio={hd['ratio']:.2f} (target <= {MAX_BURST_RATIO:g}) "
        f"rabbitmq_messages_per_agent_minute={rabbit} "
        f"nova_requests_per_agent_tick={NOVA_REQUESTS_PER_TICK:g} (computed) "
        f"missed={','.join(missed) or 'none'} void={','.join(void) or 'none'} {word}"
    )
    return word


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    scale = fleet.Scale(args.scale, args.refresh_interval)
    print_header(args, scale)
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(tempfile.TemporaryDirectory(prefix="rtagent-fleet-"))
        broker = None
        if not args.no_rabbit:
            missing = rabbitmq.missing_requirements()
            if missing:
                print(f"setup rabbitmq=missing ({missing}); --no-rabbit runs without it")
                print(f"summary k={args.k} void=rabbitmq_missing VOID")
                return 1
            broker = stack.enter_context(fleet.Broker(os.path.join(root, "rabbitmq")))
        placement = stack.enter_context(
            placement_on_postgres(workers=args.placement_workers, preload=True, max_seconds=3600)
        )
        run = {
            "args": args,
            "root": root,
            "scale": scale,
            "broker": broker,
            "placement": placement,
            "recorder": fleet.Recorder(),
            "agents": [],
            # How long a (re)start takes to answer: the outage's
            # restart begins that much before its end.
            "start_s": placement.timings["start"],
        }
        try:
            setup(run, args.k)
            figures, missed, void = phases(run, args.k)
        finally:
            for agent in run["agents"]:
                if agent.agent is not None:
                    agent.stop(final_audit=False)
    return 0 if print_summary(args.k, figures, missed, void) == "PASS" else 1


def fleet_check(agents):
    """Stop every agent's loop, then its plan against Placement (reads
    only) must be empty. :returns: (converged, instances tracked, drift)."""
    converged = tracked = drift = 0
    for a in agents:
        a.halt_loop()
    for a in agents:
        planned = a.agent.plan()
        converged += all(not ops for _, _, ops in planned)
        snapshot = a.agent.tracker.snapshot()
        tracked += len(snapshot.instances)
        drift += len(snapshot.drift.untracked) + len(snapshot.drift.missing)
        a.stop(final_audit=False)
    return converged, tracked, drift


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
