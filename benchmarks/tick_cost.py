# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Agent CPU per steady audit tick, for 0, 100 and 1000 tracked instances.

Prints key=value lines, the last a summary:

    instances=N tick_cpu_ms=T tick_cpu_p90_ms=P libvirt_floor_ms=L reads_per_tick=R
        writes_per_tick=W ticks=K
    instances=N profile_rank=I function=F tottime_share=S
    instances=N bare_get_cpu_ms=B bare_get_round_trips=M own_per_bare_get=O
    summary n0_vs_bare=X n0_vs_bare_spread=LO..HI n0_vs_bare_reps=R target=2
        n1000_vs_n0_net=Y n1000_vs_n0_net_spread=LO..HI n1000_vs_n0_net_reps=R target=2
        n1000_vs_n0=Z PASS|MISS|VOID

A whole tick is ``agent.audit()``: read the host from libvirt's test
driver, update the tracker, build the desired tree, sync it to Placement
(one read), heal. Placement runs in its own process (PlacementServer), so
``time.process_time()`` here is the agent's CPU: its own code, keystoneauth
and the libvirt client library (the test driver runs in-process too, as a
few calls on a fixed host).

Each of the N instances is tracked: claimed through the tracker, a test
driver domain with its UUID (so it is no drift), and its allocation written
as a Nova scheduler would. Steady ticks follow warm-up ticks with nothing
changed; each must make exactly one read and no write, or the figures are
VOID. ``tick_cpu_ms`` is the median over the steady ticks; the top three
functions by own CPU time (cProfile, extra ticks) are printed for N=0 and
N=1000.

Baselines, measured in the same run at every N, interleaved with the ticks:

- ``bare_get_cpu_ms``: one bare ``GET /resource_providers?in_tree=ROOT`` on
  the agent's own keystoneauth adapter and session. A steady tick makes this
  one read, so it cannot cost less.
- ``libvirt_floor_ms``: the libvirt calls a steady reading makes (six host
  calls, one getAllDomainStats, UUIDString and name per domain) on a second
  connection to the same host, answers unused. libvirt-python's own cost
  grows with the domains (~8 us each here), whatever the agent does.

Targets (ratios): the tick at N=0 costs at most 2x the bare GET; the
agent's own cost per tick at N=1000 is at most 2x its own cost at N=0
(``n1000_vs_n0_net``): what the agent itself does per tick must not grow
with the instances. The agent's own cost (``own_per_bare_get``) is each
tick less the libvirt floor measured right after it, in units of that N's
bare GETs of the same round (their median), so that a stretch of a slower
machine (it happens on shared VMs: the floor at N=1000 went from 9 to 15 ms
between two runs) cancels out instead of being multiplied by the
subtraction. ``n1000_vs_n0`` (raw) is printed for information:
libvirt-python's floor alone at N=1000 exceeds 2x a whole tick at N=0.

Each gate is judged by ``benchmarks.common.spread``: every round (one tick
of each N, each followed by its baselines) gives one ratio per gate, the
gate's figure is the median of the rounds' ratios and its ``_spread`` the
95% confidence interval of that median. PASS when the median is within the
target and the spread's top within the target + 10%; MISS when the median
is above it and the spread's bottom above the target - 10%; VOID otherwise
(the spread straddles the target by more than the 10%: too busy a machine
to tell). A spread wholly above the target is always a MISS.

Negative controls (each must MISS):

- ``--uncached-traits`` bypasses the caches of the trait lists derived from
  os_traits (the cost found in issue 12: ~80 os_traits.get_traits() calls
  per tick);
- ``--rebuild-snapshot`` drops the tracker's published snapshot before every
  tick, so each tick sorts and sums every instance again (the O(N) steady
  work found by this benchmark's profile).
"""

import argparse
import contextlib
import cProfile
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import libvirt

from benchmarks.common import spread
from benchmarks.common.verdict import run as run_benchmark
from rtagent import conf as rtconf
from rtagent.placement.client import MICROVERSION, RequestObserver
from rtagent.service import builder
from rtagent.testing.placement_server import PlacementServer
from rtagent.tracker.model import Flavor
from rtagent.virt.libvirt import driver as libvirt_driver
from rtagent.virt.libvirt.facts import DOMAIN_STATES
from rtagent.virt.libvirt.probes import capability_traits, cpu_traits

SIZES = (0, 100, 1000)
PROFILED = (0, 1000)
WARMUP = 5
# Rounds: the gates' spreads (the medians' confidence intervals) narrow
# with them; a round of the three N costs about 0.1 s here.
TICKS = 120
PROFILE_TICKS = 10
BARE_GETS_PER_TICK = 5
TARGET = 2.0
FLAVOR = Flavor(1, 16, 0)
WRITES = ("PUT", "POST", "DELETE", "PATCH")


class Counter(RequestObserver):
    def __init__(self):
        self.methods = []

    def after(self, method, url, status, seconds):
        self.methods.append(method)

    def take(self):
        methods, self.methods = self.methods, []
        return sum(m == "GET" for m in methods), sum(m in WRITES for m in methods)


def host_xml(uuids):
    """A test-driver host with one running 1-vCPU 16 MiB domain per UUID."""
    doms = "".join(
        f"<domain type='test'><name>vm-{i}</name><uuid>{u}</uuid>"
        "<memory>16384</memory><vcpu>1</vcpu><os><type>hvm</type></os>"
        "<test:runstate>1</test:runstate></domain>"
        for i, u in enumerate(uuids)
    )
    return (
        "<node xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>"
        "<cpu><mhz>2400</mhz><model>x86_64</model><nodes>1</nodes><sockets>2</sockets>"
        "<cores>8</cores><threads>2</threads></cpu><memory>268435456</memory>" + doms + "</node>"
    )


def make_conf(workdir, uri):
    conf = rtconf.new_conf()
    conf([], project="rtagent", default_config_files=[])
    conf.set_override("state_path", os.path.join(workdir, "state"))
    os.makedirs(os.path.join(workdir, "instances"))
    conf.set_override("instances_path", os.path.join(workdir, "instances"), group="libvirt")
    conf.set_override("connection_uri", uri, group="libvirt")
    # 3 online CPUs in the test driver; before the claims, the domains count
    # as untracked usage too: room for 2 x 1000 one-vCPU guests.
    conf.set_override("cpu_allocation_ratio", 1000.0)
    # Each measured tick reads Placement, as one tick per refresh interval
    # does; the ticks between skip that read and cost less.
    conf.set_override("placement_refresh_interval", 0, group="rtagent")
    return conf


def schedule(api, node, consumers):
    """Write allocations as a Nova scheduler does (one batch request)."""
    body = {
        c: {
            "allocations": {node: {"resources": {"VCPU": 1, "MEMORY_MB": 16}}},
            "project_id": "bench",
            "user_id": "bench",
            "consumer_generation": None,
            "consumer_type": "INSTANCE",
        }
        for c in consumers
    }
    if body:
        resp = api.post("/allocations", json=body)
        assert resp.status_code == 204, resp.text


def uncache_traits():
    """Negative control: the os_traits listing on every call, as before
    218f599 (~80 os_traits.get_traits() a tick): each cached function is
    replaced, in its module, by the function it wraps."""
    for module, name in (
        (capability_traits, "_defined"),
        (capability_traits, "managed_traits"),
        (cpu_traits, "_defined"),
        (cpu_traits, "_arch_defined"),
        (cpu_traits, "managed_traits"),
        (libvirt_driver, "_managed_traits"),
    ):
        setattr(module, name, getattr(module, name).__wrapped__)


def drop_snapshot(agent):
    """Negative control: the tracker rebuilds its snapshot (sorting and
    summing every instance) on every tick, as it did before this benchmark."""
    agent.tracker._published = (None, None)


class Measured:
    """One N's figures; ``void`` says why they cannot be trusted, if so."""

    def __init__(self, n):
        self.n = n
        self.ticks = []
        self.reads = []
        self.writes = []
        self.floor = []
        self.bare = []
        self.profile = []
        self.void = None

    def bare_per_round(self):
        """The median bare GET of each round."""
        k = BARE_GETS_PER_TICK
        return [statistics.median(self.bare[i : i + k]) for i in range(0, len(self.bare), k)]

    def own_per_round(self):
        """The agent's own CPU per tick (each tick less the libvirt floor
        measured right after it) in units of the same round's bare GET, one
        per round: a machine that slows down for a while (steal,
        frequency) slows the tick, its floor and the GETs alike, and the
        unit cancels it."""
        return [
            (t - f) / b
            for t, f, b in zip(self.ticks, self.floor, self.bare_per_round(), strict=True)
        ]

    def own_per_bare(self):
        return statistics.median(self.own_per_round())


def tick(agent, counter, before_tick):
    """(CPU seconds, reads, writes) of one ``agent.audit()``."""
    if before_tick is not None:
        before_tick(agent)
    counter.take()
    started = time.process_time()
    agent.audit()
    spent = time.process_time() - started
    reads, writes = counter.take()
    return spent, reads, writes


def libvirt_floor(conn):
    """CPU seconds of the libvirt calls a steady reading makes, answers unused."""
    started = time.process_time()
    conn.getInfo()
    conn.getCPUMap()
    conn.getType()
    conn.getVersion()
    conn.getHostname()
    for dom, _stats in conn.getAllDomainStats(DOMAIN_STATES, 0):
        dom.UUIDString()
        dom.name()
    return time.process_time() - started


def bare_get(adapter, root):
    """CPU seconds of one bare in_tree GET on ``adapter``; None if it failed."""
    started = time.process_time()
    resp = adapter.request(
        "/resource_providers",
        "GET",
        params={"in_tree": root},
        microversion=MICROVERSION,
        raise_exc=False,
    )
    ok = resp.status_code == 200 and len(resp.json()["resource_providers"]) == 1
    spent = time.process_time() - started
    return spent if ok else None


def top_functions(profile, count=3):
    """(name, share of the profiled CPU time) of the ``count`` functions
    with the most CPU time in their own code."""
    stats = pstats.Stats(profile)
    total = stats.total_tt or 1.0
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:count]
    top = []
    for (path, line, name), (_cc, _nc, tottime, _ct, _callers) in rows:
        where = os.path.relpath(path) if os.path.isabs(path) else path
        top.append((f"{where}:{line}({name})", tottime / total))
    return top


class Node:
    """One N's agent, its Placement process and its libvirt test host."""

    def __init__(self, stack, n, before_tick):
        self.n = n
        self.before_tick = before_tick
        self.measured = Measured(n)
        self.consumers = [str(uuid.uuid4()) for _ in range(n)]
        workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="rtagent-bench-"))
        path = os.path.join(workdir, "host.xml")
        with open(path, "w") as f:
            f.write(host_xml(self.consumers))
        uri = f"test://{path}"
        placement = stack.enter_context(PlacementServer())
        self.api = placement.admin_adapter()
        self.adapter = placement.admin_adapter()
        self.counter = Counter()
        self.agent = builder.build_agent(
            make_conf(workdir, uri), adapter=self.adapter, observer=self.counter
        )
        stack.callback(self.agent.close)
        self.conn = libvirt.open(uri)
        stack.callback(self.conn.close)
        self.node = None

    def start(self):
        """Claims, the scheduler's allocations, warm-up; VOID if the node
        does not track exactly its N instances."""
        agent = self.agent
        agent.audit()
        self.node = agent.tracker.node_uuid
        for c in self.consumers:
            agent.tracker.instance_claim(c, FLAVOR, project_id="bench")
        schedule(self.api, self.node, self.consumers)
        for _ in range(WARMUP):
            tick(agent, self.counter, self.before_tick)
        snap = agent.tracker.snapshot()
        if len(snap.instances) != self.n or snap.drift.untracked or snap.drift.missing:
            self.measured.void = "instances_not_tracked"

    def round(self):
        """One steady tick, then its baselines: the libvirt floor and the
        bare GETs, measured right after it."""
        m = self.measured
        spent, reads, writes = tick(self.agent, self.counter, self.before_tick)
        m.ticks.append(spent)
        m.reads.append(reads)
        m.writes.append(writes)
        m.floor.append(libvirt_floor(self.conn))
        for _ in range(BARE_GETS_PER_TICK):
            m.bare.append(bare_get(self.adapter, self.node))

    def finish(self):
        m = self.measured
        if self.n in PROFILED:
            profile = cProfile.Profile(time.process_time)  # CPU, not waiting
            profile.enable()
            for _ in range(PROFILE_TICKS):
                tick(self.agent, self.counter, self.before_tick)
            profile.disable()
            m.profile = top_functions(profile)
        usages = self.api.get(f"/resource_providers/{self.node}/usages").json()["usages"]
        if self.n and usages.get("VCPU") != self.n:
            m.void = m.void or "allocations_missing"
        if None in m.bare:
            m.void = m.void or "bare_get_failed"
        if any(r != 1 for r in m.reads) or any(m.writes):
            m.void = m.void or "tick_not_one_read"


def measure_all(before_tick, ticks):
    """{N: Measured} for every N of SIZES, their ticks interleaved round by
    round: a stretch of slower machine (seen: the libvirt floor at N=1000
    moving from 9 to 15 ms between runs) then falls on every N alike
    instead of on whichever N was being measured, and the ratio between
    N stays what the code makes it."""
    with contextlib.ExitStack() as stack:
        nodes = [Node(stack, n, before_tick) for n in SIZES]
        for node in nodes:
            node.start()
        live = [node for node in nodes if not node.measured.void]
        for _ in range(ticks):
            for node in live:
                node.round()
        for node in live:
            node.finish()
        return {node.n: node.measured for node in nodes}


def ms(seconds):
    return seconds * 1000.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--uncached-traits",
        action="store_true",
        help="negative control: bypass the caches of the os_traits-derived trait lists",
    )
    parser.add_argument(
        "--rebuild-snapshot",
        action="store_true",
        help="negative control: drop the tracker's snapshot before each tick",
    )
    parser.add_argument("--ticks", type=int, default=TICKS, help="steady ticks per N")
    args = parser.parse_args(argv)
    if args.uncached_traits:
        uncache_traits()
    before_tick = drop_snapshot if args.rebuild_snapshot else None

    logging.basicConfig(level=logging.ERROR)
    libvirt.registerErrorHandler(lambda *_a: None, None)

    results = measure_all(before_tick, args.ticks)
    for n, m in results.items():
        if m.ticks:
            ticks = sorted(m.ticks)
            p90 = ticks[int(0.9 * (len(ticks) - 1))]
            print(
                f"instances={n} tick_cpu_ms={ms(statistics.median(ticks)):.3f} "
                f"tick_cpu_p90_ms={ms(p90):.3f} "
                f"libvirt_floor_ms={ms(statistics.median(m.floor)):.3f} "
                f"reads_per_tick={max(m.reads)} writes_per_tick={max(m.writes)} "
                f"ticks={len(ticks)}"
            )
        for rank, (name, share) in enumerate(m.profile, 1):
            print(f"instances={n} profile_rank={rank} function={name} tottime_share={share:.3f}")
        if m.void:
            print(f"instances={n} void={m.void}")

    void = [f"{n}:{m.void}" for n, m in results.items() if m.void]
    if not void:
        for n, m in results.items():
            print(
                f"instances={n} bare_get_cpu_ms={ms(statistics.median(m.bare)):.3f} "
                f"bare_get_round_trips={len(m.bare)} own_per_bare_get={m.own_per_bare():.2f}"
            )
        big = SIZES[-1]
        tick0 = statistics.median(results[0].ticks)
        tick_big = statistics.median(results[big].ticks)
        if results[0].own_per_bare() <= 0:
            void.append("0:tick_below_libvirt_floor")
    if void:
        print(f"summary void={','.join(void)} VOID")
        return 1
    # One ratio per round: the N's ticks of a round ran within ~0.1 s of
    # each other, so a busier stretch of machine falls on both sides.
    n0_vs_bare = spread.judge(
        "n0_vs_bare", spread.ratios(results[0].ticks, results[0].bare_per_round()), TARGET
    )
    own0 = [max(x, 1e-9) for x in results[0].own_per_round()]
    net = spread.judge(
        f"n{big}_vs_n0_net", spread.ratios(results[big].own_per_round(), own0), TARGET
    )
    verdict = spread.combine([n0_vs_bare.verdict, net.verdict])
    print(n0_vs_bare.line())
    print(net.line())
    print(
        f"summary {n0_vs_bare.fields()} target={TARGET:g} "
        f"{net.fields()} target={TARGET:g} "
        f"n{big}_vs_n0={tick_big / tick0:.2f} {verdict}"
    )
    return 0 if verdict == spread.PASS else 1


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
