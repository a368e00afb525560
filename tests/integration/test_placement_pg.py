"""The sync against a real Placement process on PostgreSQL, with 4 external
writers changing traits, aggregates and the ``reserved`` of our providers
for 30 s while the agent's periodic loop syncs.

Started and stopped here by PID (rtagent.testing.postgres, placement_server),
on loopback, also when the test fails. Skipped where PostgreSQL cannot run,
unless CI is set: then it fails.
"""

import collections
import os
import random
import threading
import time
import uuid

import pytest

from rtagent import conf as rtconf
from rtagent.placement import errors
from rtagent.placement.client import RequestObserver
from rtagent.placement.desired import desired_tree
from rtagent.placement.tree import Provider
from rtagent.resources import Inventory, frozen_map
from rtagent.service import builder
from rtagent.service.periodic import PeriodicLoop
from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.postgres import Postgres, missing_requirements
from tests.integration.conftest import require

pytestmark = pytest.mark.integration

ROOT_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO_URI = "test:///" + os.path.join(ROOT_DIR, "etc", "rtagent", "demo-host.xml")
DURATION_S = float(os.environ.get("RTAGENT_PG_WRITERS_SECONDS", "30"))
WRITERS = 4
# The work both sides must have done before the writers stop.
MIN_WRITES = 100
MIN_SYNCS = 10


@pytest.fixture(scope="module")
def placement_pg():
    require(missing_requirements(), "PostgreSQL Placement")
    with Postgres() as pg:
        pg.create_database("placement")
        with PlacementServer(db=pg.url("placement")) as server:
            yield server


class Counter(RequestObserver):
    def __init__(self):
        self.by_method = collections.Counter()
        self.conflicts = 0

    def after(self, method, url, status, seconds):
        self.by_method[method] += 1
        self.conflicts += status == 409


class Writer(threading.Thread):
    """An operator script: read-modify-write with generations, retrying its
    own conflicts, and remembering what it believes it set."""

    def __init__(self, index, adapter, providers, stop):
        super().__init__(daemon=True, name=f"writer-{index}")
        self.index = index
        self.api = adapter
        self.providers = providers
        self.stop_event = stop
        self.rng = random.Random(index)
        self.traits = {rp: set() for rp in providers}
        self.aggregates = {rp: set() for rp in providers}
        self.writes = 0
        self.conflicts = 0
        self.error = None
        self.pool = [f"CUSTOM_W{index}_T{k}" for k in range(4)]
        for trait in self.pool:
            assert self.api.put(f"/traits/{trait}").status_code in (201, 204)

    def run(self):
        try:
            while not self.stop_event.is_set():
                rp = self.rng.choice(self.providers)
                action = self.rng.choice((self.flip_trait, self.flip_aggregate, self.reserve))
                action(rp)
                self.stop_event.wait(self.rng.uniform(0.05, 0.2))
        except Exception as exc:  # reported by the test
            self.error = exc

    def _rmw(self, url, key, change):
        while True:
            body = self.api.get(url).json()
            payload = change(body)
            if payload is None:
                return False
            resp = self.api.put(url, json=payload)
            if resp.status_code == 409:
                self.conflicts += 1
                continue
            assert resp.status_code == 200, resp.text
            self.writes += 1
            return True

    def flip_trait(self, rp):
        trait = self.rng.choice(self.pool)
        want = self.traits[rp] ^ {trait}

        def change(body):
            traits = set(body["traits"]) - set(self.pool) | want
            return {
                "resource_provider_generation": body["resource_provider_generation"],
                "traits": sorted(traits),
            }

        if self._rmw(f"/resource_providers/{rp}/traits", "traits", change):
            self.traits[rp] = want

    def flip_aggregate(self, rp):
        agg = str(uuid.UUID(int=self.index * 16 + self.rng.randrange(3)))
        want = self.aggregates[rp] ^ {agg}
        mine = {str(uuid.UUID(int=self.index * 16 + k)) for k in range(3)}

        def change(body):
            aggs = set(body["aggregates"]) - mine | want
            return {
                "resource_provider_generation": body["resource_provider_generation"],
                "aggregates": sorted(aggs),
            }

        if self._rmw(f"/resource_providers/{rp}/aggregates", "aggregates", change):
            self.aggregates[rp] = want

    def reserve(self, rp):
        """Change the reserved amount of one of OUR inventories."""

        def change(body):
            invs = body["inventories"]
            rc = self.rng.choice(sorted(invs))
            invs[rc]["reserved"] = self.rng.randrange(0, invs[rc]["total"])
            return {
                "resource_provider_generation": body["resource_provider_generation"],
                "inventories": invs,
            }

        self._rmw(f"/resource_providers/{rp}/inventories", "inventories", change)


def test_four_writers_for_30_seconds_then_convergence(placement_pg, tmp_path):
    conf = rtconf.new_conf()
    conf([], project="rtagent", default_config_files=[])
    conf.set_override("state_path", str(tmp_path / "state"))
    # Convergence under foreign writers at every audit; with the default
    # interval their changes are reconciled at the next due read instead.
    conf.set_override("placement_refresh_interval", 0, group="rtagent")
    conf.set_override("connection_uri", DEMO_URI, group="libvirt")
    (tmp_path / "instances").mkdir()
    conf.set_override("instances_path", str(tmp_path / "instances"), group="libvirt")
    counter = Counter()
    agent = builder.build_agent(conf, adapter=placement_pg.admin_adapter(), observer=counter)
    stop = threading.Event()
    writers = []
    loop_thread = None
    try:
        agent.audit()
        root = agent.tracker.node_uuid
        child = Provider(
            uuid=str(uuid.uuid5(uuid.UUID(root), "pf0")),
            name=agent.tracker.snapshot().hypervisor_hostname + "_pf0",
            parent_uuid=root,
            inventories=frozen_map({"CUSTOM_NIC_VF": Inventory(total=8, max_unit=8)}),
            traits=frozenset({"OWNER_NOVA"}),
            managed_traits=frozenset({"OWNER_NOVA"}),
            managed_classes=frozenset({"CUSTOM_NIC_VF"}),
        )
        sync = agent.sync

        def desired():
            # As the agent builds it: the driver's traits (HW_ARCH_* of the
            # demo host) among them.
            return desired_tree(
                agent.tracker.snapshot(),
                driver_traits=agent.tracker.snapshot().host.traits,
                managed_traits=agent.driver.managed_traits,
                children=(child,),
            )

        outcomes = collections.Counter()
        attempts = collections.Counter()

        def tick():
            try:
                result = sync.sync(desired())
            except errors.SyncConflictsExhausted:
                outcomes["exhausted"] += 1
                raise  # the loop must survive it
            except Exception:
                outcomes["error"] += 1
                raise
            outcomes["ok"] += 1
            attempts[result.attempts] += 1

        tick()  # create the child before the writers start
        providers = [root, child.uuid]
        writers = [Writer(i, placement_pg.admin_adapter(), providers, stop) for i in range(WRITERS)]
        loop = PeriodicLoop(tick, interval=0.1)
        loop_thread = threading.Thread(target=loop.run, daemon=True)
        loop_thread.start()
        for w in writers:
            w.start()
        # At least DURATION_S, and on until both sides did a fixed amount
        # of work (a loaded machine takes longer for it, not less of it);
        # the guard, 5 x the duration (over 10 x the ~10 s the work takes
        # idle) and inside pytest-timeout, only catches a stall.
        started = time.monotonic()
        while time.monotonic() - started < 5 * DURATION_S and not (
            time.monotonic() - started >= DURATION_S
            and sum(w.writes for w in writers) > MIN_WRITES
            and outcomes["ok"] >= MIN_SYNCS
        ):
            time.sleep(0.5)
        seconds = time.monotonic() - started
        stop.set()
        for w in writers:
            w.join(10)
        loop.stop()
        loop_thread.join(10)
        assert not loop_thread.is_alive()
        assert [w.error for w in writers] == [None] * WRITERS

        # Convergence: the next sync makes Placement equal the desired tree,
        # with every writer's traits and aggregates kept.
        sync.sync(desired())
        api = placement_pg.admin_adapter()
        want = desired()
        for rp in providers:
            traits = set(api.get(f"/resource_providers/{rp}/traits").json()["traits"])
            writers_traits = set().union(*(w.traits[rp] for w in writers))
            assert traits == set(want.get(rp).traits) | writers_traits
            aggs = set(api.get(f"/resource_providers/{rp}/aggregates").json()["aggregates"])
            assert aggs == set().union(*(w.aggregates[rp] for w in writers))
            invs = api.get(f"/resource_providers/{rp}/inventories").json()["inventories"]
            for rc, inv in want.get(rp).inventories.items():
                assert invs[rc]["reserved"] == inv.reserved, (rp, rc)
        counter.by_method.clear()
        assert sync.sync(desired()).operations == ()
        assert sum(counter.by_method.values()) == 1

        writes = sum(w.writes for w in writers)
        print(
            f"\npg_writers seconds={seconds:.0f} writer_writes={writes} "
            f"writer_conflicts={sum(w.conflicts for w in writers)} "
            f"agent_syncs={outcomes['ok']} agent_exhausted={outcomes['exhausted']} "
            f"agent_errors={outcomes['error']} agent_attempts={dict(sorted(attempts.items()))}"
        )
        # Both sides made progress (the agent's loop was not starved by the
        # conflicts): 30-36 syncs in 30 s idle, 18-19 seen while another
        # test run loaded the machine, and 77 writes where 100 were wanted;
        # so the run lasts until both did their share, and a rate is a
        # benchmark's.
        assert writes > MIN_WRITES and outcomes["ok"] >= MIN_SYNCS
        assert outcomes["error"] == 0
        # Exhaustion is allowed to happen (then the next tick retries), but
        # the syncs that got through must not be outnumbered by those that
        # gave up: a starvation guard, not a rate. How often it happens
        # depends on how fast 4 writers hit the same two providers on 2
        # cores: 2-3 of 30-36 syncs idle, 3 of 28 under a CI run, 8 of 19
        # beside make test, four nova test loops and two busy loops (load
        # average 8-9). Its rate under contention is a benchmark's.
        assert outcomes["exhausted"] <= outcomes["ok"]
    finally:
        stop.set()
        for w in writers:
            w.join(10)
        agent.close()
