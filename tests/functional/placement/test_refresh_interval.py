"""The steady read decoupled from the audit (``placement_refresh_interval``):
an unchanged node reads Placement once per interval, a local change syncs at
once, and someone else's change is reconciled at the next due read. Against
the real Placement app, with a scripted clock."""

import time
import uuid

import pytest

from rtagent.placement import errors
from rtagent.placement.checkpoint import MetaRecord
from rtagent.placement.sync import ProviderSync
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map
from tests.functional.conftest import Recorder
from tests.functional.placement.conftest import get, put_allocation
from tests.functional.placement.test_node_invariants import RES, TINY

pytestmark = pytest.mark.functional

ROOT = "9f1a2b3c-0000-4000-8000-0000000000f1"
MANAGED = frozenset({"COMPUTE_NODE", "CUSTOM_RT_REFRESH"})


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def tree(vcpus=8):
    """The desired tree: ``vcpus`` 0 asks for no VCPU inventory."""
    inventories = {"VCPU": Inventory(total=vcpus, max_unit=vcpus)} if vcpus else {}
    return ProviderTree(
        [
            Provider(
                uuid=ROOT,
                name="refresh-host",
                traits=MANAGED,
                managed_traits=MANAGED,
                inventories=frozen_map(inventories),
                managed_classes=frozenset({"VCPU"}),
            )
        ]
    )


def traits_of(operator, rp):
    return set(get(operator, f"/resource_providers/{rp}/traits")["traits"])


def drop_trait(operator, rp, trait):
    """Someone else removes ``trait`` from the provider."""
    gen = get(operator, f"/resource_providers/{rp}")["generation"]
    resp = operator.put(
        f"/resource_providers/{rp}/traits",
        json={
            "resource_provider_generation": gen,
            "traits": sorted(traits_of(operator, rp) - {trait}),
        },
    )
    assert resp.status_code == 200, resp.text


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def sync(client, clock):
    # rng 0.0: the due read comes exactly one interval after the last read.
    return ProviderSync(client, rng=lambda: 0.0, refresh_interval=300, clock=clock)


def test_an_unchanged_node_reads_placement_once_per_interval(sync, recorder, clock):
    sync.sync(tree())
    assert sync.refresh_due_in() == 300
    recorder.reset()
    for _ in range(5):  # five 60 s audits inside the interval
        clock.now += 59
        result = sync.sync(tree())
        assert not result.read and result.operations == ()
    assert recorder.count() == 0
    clock.now += 6  # 301 s after the last read
    assert sync.refresh_due_in() == 0
    result = sync.sync(tree())
    assert result.read and result.operations == ()
    assert recorder.count() == 1  # GET ?in_tree, nothing to write


def test_a_local_change_syncs_at_once(sync, recorder, clock, operator):
    sync.sync(tree(vcpus=8))
    recorder.reset()
    clock.now += 1
    result = sync.sync(tree(vcpus=16))
    assert result.read and len(result.operations) == 1
    inventories = get(operator, f"/resource_providers/{ROOT}/inventories")["inventories"]
    assert inventories["VCPU"]["total"] == 16
    assert recorder.count("PUT") == 1
    # The interval starts again from that read.
    assert sync.refresh_due_in() == 300


def test_someone_elses_change_is_reconciled_at_the_due_read(sync, clock, operator):
    sync.sync(tree())
    drop_trait(operator, ROOT, "CUSTOM_RT_REFRESH")
    clock.now += 299
    sync.sync(tree())
    assert "CUSTOM_RT_REFRESH" not in traits_of(operator, ROOT)  # not seen yet
    clock.now += 2
    result = sync.sync(tree())
    assert result.read and result.operations
    assert MANAGED <= traits_of(operator, ROOT)


def test_invalidate_reads_at_the_next_sync(sync, recorder, clock, operator):
    sync.sync(tree())
    drop_trait(operator, ROOT, "CUSTOM_RT_REFRESH")
    sync.invalidate()  # the operator asked (SIGHUP / rtagent refresh)
    assert sync.refresh_due_in() == 0
    recorder.reset()
    clock.now += 1
    assert sync.sync(tree()).read
    assert MANAGED <= traits_of(operator, ROOT)


def test_a_failed_sync_is_retried_at_the_next_audit(client, clock, operator):
    sync = ProviderSync(client, rng=lambda: 0.0, refresh_interval=300, clock=clock)
    sync.sync(tree())
    # An allocation holds VCPU: the agent's removal of that inventory is
    # refused (InventoryInUse), and its retry must not wait an interval.
    consumer = "7c0ffee0-0000-4000-8000-0000000000f1"
    put_allocation(operator, consumer, {ROOT: {"VCPU": 8}})
    with pytest.raises(errors.PlacementRequestFailed):  # InventoryInUse
        sync.sync(tree(vcpus=0))
    assert sync.refresh_due_in() == 0
    operator.delete(f"/allocations/{consumer}")
    clock.now += 1
    result = sync.sync(tree(vcpus=0))
    assert result.read and result.operations
    assert get(operator, f"/resource_providers/{ROOT}/inventories")["inventories"] == {}


def test_without_an_interval_every_sync_reads(client, recorder, clock):
    sync = ProviderSync(client, refresh_interval=0, clock=clock)
    sync.sync(tree())
    recorder.reset()
    for _ in range(3):
        assert sync.sync(tree()).read
    assert recorder.count() == 3
    assert sync.refresh_due_in() is None


def test_an_agent_with_the_default_interval(make_agent, make_conf, operator):
    """The agent as built from config (default 300 s): a steady audit sends
    nothing; a claim (a new consumer) makes the next audit look at once;
    status says when the next look for others' changes is due."""
    recorder = Recorder()
    conf = make_conf()
    conf.clear_override("placement_refresh_interval", group="rtagent")
    assert conf.rtagent.placement_refresh_interval == 300
    agent = make_agent(conf, observer=recorder)
    node = agent.tracker.node_uuid
    agent.audit()
    recorder.reset()
    for _ in range(3):
        assert not agent.audit().sync.read
    assert recorder.count() == 0

    consumer = str(uuid.uuid4())
    put_allocation(operator, consumer, {node: RES})
    agent.tracker.instance_claim(consumer, TINY)
    assert agent.audit().sync.read
    urls = [u for _, u, _ in recorder.requests]
    assert "/resource_providers" in urls  # ?in_tree=<node>
    assert f"/allocations/{consumer}" in urls  # the unknown-consumer check
    recorder.reset()
    agent.audit()
    assert recorder.count() == 0

    due = agent.sync_status()[node]["next_placement_read"]
    assert 270 <= due - time.time() <= 300


def restarted(make_agent, conf, recorder):
    """The agent built again from the same state directory (a restart)."""
    return make_agent(conf, observer=recorder)


def test_a_restart_with_nothing_changed_reads_placement_within_the_interval_not_at_once(
    make_agent, make_conf, operator
):
    """After a restart (a whole fleet's, at an upgrade) the agent resumes
    from the view it last synced: its first audit sends nothing, and its
    first look at Placement comes at a random point of the interval."""
    recorder = Recorder()
    conf = make_conf(rtagent__placement_refresh_interval=300)
    agent = make_agent(conf, observer=recorder)
    node = agent.tracker.node_uuid
    agent.audit()
    consumer = str(uuid.uuid4())
    put_allocation(operator, consumer, {node: RES})
    agent.tracker.instance_claim(consumer, TINY)
    agent.audit()
    agent.audit()
    agent.close()

    recorder.reset()
    agent = restarted(make_agent, conf, recorder)
    result = agent.audit()
    assert not result.sync.read
    assert recorder.count() == 0  # no listing, no inventories, no allocations
    state = agent.sync_status()[node]
    assert state["in_sync"]
    assert time.time() <= state["next_placement_read"] <= time.time() + 300
    # The restored view is Placement's (its ratios reach the tracker).
    held = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    assert agent.sync.placement_ratios(node)["VCPU"] == held["VCPU"]["allocation_ratio"]


def test_a_restart_after_a_local_change_reads_placement_at_once(make_agent, make_conf, operator):
    recorder = Recorder()
    conf = make_conf(rtagent__placement_refresh_interval=300)
    agent = make_agent(conf, observer=recorder)
    node = agent.tracker.node_uuid
    agent.audit()
    agent.close()

    conf.set_override("ram_allocation_ratio", 3.0)  # changed while down
    recorder.reset()
    agent = restarted(make_agent, conf, recorder)
    assert agent.audit().sync.read
    assert recorder.count("PUT") == 1
    inventories = get(operator, f"/resource_providers/{node}/inventories")["inventories"]
    assert inventories["MEMORY_MB"]["allocation_ratio"] == 3.0


def test_a_restarted_sync_resumes_from_its_checkpoint(client, recorder, clock, operator):
    """The checkpoint at the sync's level: the first read after the restart
    comes at rng x the interval and costs the listing alone; a foreign
    change made meanwhile is reconciled then."""
    meta = {}
    record = MetaRecord(meta.get, meta.__setitem__, "placement_view:x")
    sync = ProviderSync(
        client, rng=lambda: 0.0, refresh_interval=300, clock=clock, checkpoint=record
    )
    sync.sync(tree(), local=frozenset({"a"}))
    assert meta  # written by the sync that read
    written = dict(meta)
    clock.now += 400
    sync.sync(tree(), local=frozenset({"a"}))  # a due read, nothing changed
    assert meta == written  # not written again

    drop_trait(operator, ROOT, "CUSTOM_RT_REFRESH")  # while the agent is down
    recorder.reset()
    again = ProviderSync(
        client, rng=lambda: 0.5, refresh_interval=300, clock=clock, checkpoint=record
    )
    assert not again.sync(tree(), local=frozenset({"a"})).read
    assert again.refresh_due_in() == 150 and recorder.count() == 0
    clock.now += 151
    result = again.sync(tree(), local=frozenset({"a"}))
    assert result.read and result.operations  # the trait is put back
    # The listing, then the provider whose generation moved (inventories,
    # traits); the custom trait's PUT and the provider's.
    assert recorder.count("GET") == 3
    assert MANAGED <= traits_of(operator, ROOT)

    # Another consumer since (a claim replayed from the journal): read at once.
    third = ProviderSync(
        client, rng=lambda: 0.5, refresh_interval=300, clock=clock, checkpoint=record
    )
    assert third.sync(tree(), local=frozenset({"a", "b"})).read
