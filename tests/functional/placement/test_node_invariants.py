"""Issue 10 against the real Placement app: healing never removes a live
allocation (an instance moving back), a stale unknown-consumer report
clears when its claim arrives, healing is bounded per tick, and a standalone
claim's rollback never takes an acknowledged claim with it."""

import uuid

import pytest

from rtagent.placement import errors as placement_errors
from rtagent.placement.passes.heal import AllocationHealer, HealBudget
from rtagent.placement.standalone import claim_standalone
from rtagent.service import builder
from rtagent.tracker import errors
from rtagent.tracker.model import Flavor
from tests.functional.conftest import Recorder, make_adapter
from tests.functional.placement.conftest import allocations_of, put_allocation
from tests.functional.test_nodes import NODE_A, NODE_B, NodesDriver

pytestmark = pytest.mark.functional

TINY = Flavor(1, 256)
RES = {"VCPU": 1, "MEMORY_MB": 256}


@pytest.fixture
def two_nodes(placement, make_conf):
    agent = builder.build_agent(
        make_conf(), driver=NodesDriver([NODE_A, NODE_B]), adapter=make_adapter(placement.endpoint)
    )
    result = agent.audit()
    names = {snap.hypervisor_hostname: uuid for uuid, (snap, _) in result.nodes.items()}
    yield agent, names["node-a"], names["node-b"]
    agent.close()


def move_allocation(operator, consumer, allocations):
    body = operator.get(f"/allocations/{consumer}").json()
    put_allocation(operator, consumer, allocations, generation=body.get("consumer_generation"))


def test_an_instance_moving_back_keeps_its_allocation(two_nodes, operator):
    """X live-migrates A -> B, and within a tick starts moving back B -> A.
    A had released X when it left; the move back makes it active again, so
    A's healing must leave X's new allocation on A alone, tick after tick."""
    agent, a, b = two_nodes
    node_a, node_b = agent.nodes.get(a), agent.nodes.get(b)
    x, there, back = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    node_a.instance_claim(x, TINY)
    put_allocation(operator, x, {a: RES})

    live = dict(old_flavor=TINY, new_flavor=TINY)
    for node in (node_a, node_b):
        node.start_move(there, x, "live-migration", source_node=a, dest_node=b, **live)
    # the conductor: the migration consumer holds the source, X the dest
    put_allocation(operator, there, {a: RES})
    move_allocation(operator, x, {b: RES})
    for node in (node_a, node_b):
        node.finish_move(there)
    move_allocation(operator, there, {})
    assert x in node_a.snapshot().released

    # the way back starts before A's next tick
    for node in (node_b, node_a):
        node.start_move(back, x, "live-migration", source_node=b, dest_node=a, **live)
    put_allocation(operator, back, {b: RES})
    move_allocation(operator, x, {a: RES})

    for _ in range(3):
        agent.audit()
        assert allocations_of(operator, x) == {a: RES}
    assert x not in node_a.snapshot().released


def test_an_unknown_consumer_stops_being_reported_when_its_claim_arrives(make_agent, operator):
    agent = make_agent()
    agent.audit()
    node = agent.tracker.node_uuid
    late = str(uuid.uuid4())
    put_allocation(operator, late, {node: RES})
    agent.audit()  # found once: a candidate
    agent.audit()  # found twice: reported
    assert agent.sync_status()[node]["unknown_consumers"] == [late]
    assert late in agent.unknown_consumers()[node]

    agent.tracker.instance_claim(late, TINY)  # the claim arrives after all
    assert agent.sync_status()[node]["unknown_consumers"] == []
    assert agent.unknown_consumers()[node] == {}
    agent.audit()
    assert agent.sync_status()[node]["unknown_consumers"] == []


def test_healing_is_bounded_per_tick_and_the_backlog_is_reported(make_agent, make_conf, operator):
    recorder = Recorder()
    # Ratio 16: the demo host's untracked guests are reserved (7 vCPUs),
    # and Placement must still have room for the 7 allocations healed here.
    conf = make_conf(rtagent__heal_max_consumers=3, cpu_allocation_ratio=16.0)
    agent = make_agent(conf, observer=recorder)
    agent.audit()
    node = agent.tracker.node_uuid
    gone = [str(uuid.uuid4()) for _ in range(7)]
    for inst in gone:
        agent.tracker.instance_claim(inst, TINY)
        put_allocation(operator, inst, {node: RES})
        agent.tracker.abort_instance_claim(inst)

    backlogs = []
    for _ in range(12):
        recorder.reset()
        agent.audit()
        looked = [
            u for m, u, _ in recorder.requests if m == "GET" and u.startswith("/allocations/")
        ]
        assert len(looked) <= 3
        backlogs.append(agent.sync_status()[node]["healing_backlog"])
        if not agent.tracker.snapshot().released:
            break
    assert backlogs[0] == 4
    assert backlogs[-1] == 0
    assert agent.tracker.snapshot().released == frozenset()
    assert all(allocations_of(operator, inst) == {} for inst in gone)


def test_healing_stops_when_its_time_is_spent(make_agent, make_conf, operator, client):
    agent = make_agent(make_conf(cpu_allocation_ratio=16.0))  # room beside the demo guests
    agent.audit()
    node = agent.tracker.node_uuid
    for _ in range(5):
        inst = str(uuid.uuid4())
        agent.tracker.instance_claim(inst, TINY)
        put_allocation(operator, inst, {node: RES})
        agent.tracker.abort_instance_claim(inst)
    now = [0.0]

    def clock():
        now[0] += 0.4  # each look at the clock: 0.4 s later
        return now[0]

    healer = AllocationHealer(client, HealBudget(max_consumers=100, max_seconds=1.0), clock)
    result = healer.heal(agent.tracker.snapshot().healable, [node])
    assert len(result.pending) == 2 and len(result.deferred) == 3


def blocked_put(recorder, consumer, during):
    """Run ``during()`` once, just before our client's PUT of ``consumer``'s
    allocations goes out (the standalone write is in flight)."""
    fired = []

    def hook(method, url):
        if method == "PUT" and url == f"/allocations/{consumer}" and not fired:
            fired.append(True)
            during()

    recorder.hook = hook


def assert_told_to_retry(agent, x, outcome):
    """The racing call was told to retry; had it been told "granted", its
    claim would have to be there (the bug: granted, then rolled back)."""
    held = x in {i.uuid for i in agent.tracker.snapshot().instances}
    assert outcome == ["retry"] or held, f"{outcome[0]} but the claim is gone"
    assert outcome == ["retry"]


def test_a_plain_claim_racing_a_standalone_rollback_is_not_lost(
    make_agent, operator, client, recorder
):
    """X holds another allocation already, so the standalone write will be
    refused and rolled back. A plain claim of X arriving meanwhile must not
    be told "granted" and then lose its claim to that rollback."""
    agent = make_agent()
    agent.audit()
    node = agent.tracker.node_uuid
    x = str(uuid.uuid4())
    put_allocation(operator, x, {node: {"VCPU": 2}})
    outcome = []

    def plain_claim():
        try:
            agent.tracker.instance_claim(x, TINY)
            outcome.append("granted")
        except errors.ClaimPending:
            outcome.append("retry")

    blocked_put(recorder, x, plain_claim)
    with pytest.raises(placement_errors.AllocationRefused):
        claim_standalone(agent.tracker, client, x, TINY, project_id="p", user_id="u")
    assert_told_to_retry(agent, x, outcome)


def test_a_standalone_retry_racing_a_timed_out_write_is_not_lost(make_agent, client, recorder):
    """The first standalone call's write times out (its outcome unknown) and
    it rolls back; a retry that ran meanwhile must not be told "granted"
    and then lose its claim."""
    agent = make_agent()
    agent.audit()
    x = str(uuid.uuid4())
    outcome = []

    def retry_then_time_out():
        try:
            claim_standalone(agent.tracker, client, x, TINY, project_id="p", user_id="u")
            outcome.append("granted")
        except errors.ClaimPending:
            outcome.append("retry")
        # the first call's own write now times out
        raise placement_errors.PlacementUnavailable(method="PUT", url="/allocations", reason="t")

    blocked_put(recorder, x, retry_then_time_out)
    with pytest.raises(placement_errors.PlacementUnavailable):
        claim_standalone(agent.tracker, client, x, TINY, project_id="p", user_id="u")
    assert_told_to_retry(agent, x, outcome)
    # released, not forgotten: if the write landed after all, healing removes it
    assert x in agent.tracker.snapshot().healable


def test_a_claim_granted_while_its_allocation_is_healed_gets_it_back(
    make_agent, operator, client, recorder
):
    """A standalone write landed but timed out, so X was released; healing
    sees X once. On the next pass, between the healer's check and its write,
    the caller's retry finds its allocation present and is granted. The
    healer's write then removes it: it must put it back."""
    agent = make_agent()
    agent.audit()
    node = agent.tracker.node_uuid
    x = str(uuid.uuid4())
    claim = agent.tracker.instance_claim(x, TINY, pending=True)
    put_allocation(operator, x, {node: RES}, consumer_type="INSTANCE")
    agent.tracker.roll_back_pending(x, claim.token)  # the write "timed out"
    healer = AllocationHealer(client)
    still = lambda consumer: consumer in agent.tracker.snapshot().healable  # noqa: E731
    assert healer.heal(agent.tracker.snapshot().healable, [node], still).pending == {x}
    granted = []

    def retry():
        granted.append(
            claim_standalone(agent.tracker, client, x, TINY, project_id="proj", user_id="user")
        )

    blocked_put(recorder, x, retry)
    result = healer.heal(agent.tracker.snapshot().healable, [node], still)
    assert granted and x in {i.uuid for i in agent.tracker.snapshot().instances}
    assert result.restored == {x} and x not in result.healed
    assert allocations_of(operator, x) == {node: RES}
