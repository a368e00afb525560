"""docs/rpc-api.md, "Who does what in Placement", "Timeouts" and
``get_instance``, over a real RabbitMQ and a real Placement process: calls
go through the broker, the test plays the scheduler and conductor writing
allocations, and drives the agent's audits itself (no daemon loop), so each
healing pass is one ``audit()``.
"""

import time
import uuid

import pytest

from tests.functional.conftest import put_allocation
from tests.functional.rpc.conftest import Served
from tests.functional.rpc.harness import bounded_call, make_conf

pytestmark = pytest.mark.functional

PLACEMENT_TIMEOUT_S = 3
OTHER_NODE = "20000000-0000-4000-8000-000000000000"
FLAVOR = {"vcpus": 1, "memory_mb": 256}
RESOURCES = {"VCPU": 1, "MEMORY_MB": 256}


@pytest.fixture(scope="module")
def served(broker, placement_server, tmp_path_factory):
    agent = Served(
        make_conf(
            str(tmp_path_factory.mktemp("roles")),
            broker.transport_url,
            host="roles-host",
            cpu_allocation_ratio=64.0,
        ),
        placement_server.endpoint,
        placement_timeout=PLACEMENT_TIMEOUT_S,
    )
    yield agent
    agent.stop()


@pytest.fixture(scope="module")
def scheduler(placement_server):
    """The caller's own Placement writes (nova's scheduler and conductor)."""
    return placement_server.admin_adapter()


@pytest.fixture
def client(served):
    return served.client(timeout=20)


def call(client, method, **args):
    return bounded_call(client, 30, method, **args)


def ok(client, method, **args):
    reply = call(client, method, **args)
    assert reply["ok"], reply
    return reply["result"]


def refused(client, method, code, **args):
    reply = call(client, method, **args)
    assert not reply["ok"] and reply["error"]["code"] == code, reply
    return reply["error"]


def new_uuid():
    return str(uuid.uuid4())


def allocations(scheduler, consumer):
    resp = scheduler.get(f"/allocations/{consumer}")
    assert resp.status_code == 200, resp.text
    return {rp: a["resources"] for rp, a in resp.json()["allocations"].items()}


def audits(served, count=2):
    """``count`` audits: healing removes a released consumer's allocation
    on the second pass that sees the same consumer generation."""
    for _ in range(count):
        served.agent.audit()


def unknown(served):
    """Consumers on the node's providers it does not know, checked now (as
    ``rtagent status`` asks): what the report names once it refreshes."""
    return set(served.agent.report_unknown_consumers())


def move(served, migration, instance, migration_type, source, dest):
    return {
        "migration_uuid": migration,
        "instance_uuid": instance,
        "migration_type": migration_type,
        "source_node": source,
        "dest_node": dest,
        "old_flavor": FLAVOR,
    }


# -- get_instance ------------------------------------------------------------


def test_get_instance_reads_back_claims_moves_and_releases(served, client):
    node = served.node_uuid
    inst = new_uuid()
    refused(client, "get_instance", "tracker.instance_not_found", instance_uuid=inst)

    ok(client, "instance_claim", instance_uuid=inst, flavor=FLAVOR, project_id="p")
    ok(client, "update_instance", instance_uuid=inst, vm_state="active")
    record = ok(client, "get_instance", instance_uuid=inst.upper())
    assert record == {
        "instance_uuid": inst,
        "node_uuid": node,
        "claim": {
            "flavor": {
                "vcpus": 1,
                "memory_mb": 256,
                "root_gb": 0,
                "ephemeral_gb": 0,
                "swap_mb": 0,
                "name": "",
            },
            "resources": RESOURCES,
            "assigned": {},
            "volume_backed": False,
            "project_id": "p",
            "vm_state": "active",
            "task_state": None,
            "numa": None,
            "pci_devices": [],
        },
        "pending": False,
        "released": False,
        "moves": [],
    }

    mig = new_uuid()
    ok(client, "start_move", **move(served, mig, inst, "resize", node, node))
    moves = ok(client, "get_instance", instance_uuid=inst)["moves"]
    assert [(m["migration_uuid"], m["status"], m["old_resources"]) for m in moves] == [
        (mig, "pre-migrating", RESOURCES)
    ]
    ok(client, "confirm_move", migration_uuid=mig)

    assert ok(client, "abort_instance_claim", instance_uuid=inst) == {"released": True}
    record = ok(client, "get_instance", instance_uuid=inst)
    assert (record["claim"], record["released"], record["moves"]) == (None, True, [])
    # Nothing of it in Placement: the first healing pass forgets it.
    audits(served, 1)
    refused(client, "get_instance", "tracker.instance_not_found", instance_uuid=inst)
    refused(
        client, "get_instance", "tracker.node_not_found", instance_uuid=inst, node_uuid=OTHER_NODE
    )


# -- who does what in Placement ---------------------------------------------


def test_the_agent_heals_deleted_and_aborted_instances(served, client, scheduler):
    node = served.node_uuid
    aborted, deleted = new_uuid(), new_uuid()
    for inst in (aborted, deleted):
        put_allocation(scheduler, inst, {node: RESOURCES})
        ok(client, "instance_claim", instance_uuid=inst, flavor=FLAVOR)
    ok(client, "abort_instance_claim", instance_uuid=aborted)
    ok(client, "update_instance", instance_uuid=deleted, vm_state="deleted")
    for inst in (aborted, deleted):
        assert ok(client, "get_instance", instance_uuid=inst)["released"] is True
    audits(served, 1)
    # Deleted is gone for good: healed at the first look. Aborted is seen
    # once, not healed yet (a scheduler may be placing it back).
    assert allocations(scheduler, deleted) == {}
    assert allocations(scheduler, aborted)
    audits(served, 2)
    assert allocations(scheduler, aborted) == {} and allocations(scheduler, deleted) == {}
    for inst in (aborted, deleted):
        refused(client, "get_instance", "tracker.instance_not_found", instance_uuid=inst)


def test_a_refused_claims_allocation_is_the_callers_to_delete(served, client, scheduler):
    node = served.node_uuid
    inst = new_uuid()
    put_allocation(scheduler, inst, {node: RESOURCES})
    refused(
        client,
        "instance_claim",
        "tracker.compute_resources_unavailable",
        instance_uuid=inst,
        flavor=FLAVOR,
        limits={"memory_mb": 1},
    )
    refused(client, "get_instance", "tracker.instance_not_found", instance_uuid=inst)
    audits(served, 3)
    assert allocations(scheduler, inst) == {node: RESOURCES}  # left alone
    assert inst in unknown(served)  # and reported
    scheduler.delete(f"/allocations/{inst}")  # the caller's job
    assert inst not in unknown(served)


def conductor_moves_to_migration(scheduler, node, inst, mig, instance_keeps):
    """What nova's conductor does before a move: the source's allocation
    goes to the migration consumer; the instance consumer keeps
    ``instance_keeps`` (its destination's allocation)."""
    put_allocation(scheduler, mig, {node: RESOURCES}, consumer_type="MIGRATION")
    resp = scheduler.get(f"/allocations/{inst}")
    generation = resp.json()["consumer_generation"]
    put_allocation(scheduler, inst, instance_keeps, generation=generation)


def test_the_migration_consumer_is_the_callers_on_confirm(served, client, scheduler):
    node = served.node_uuid
    inst, mig = new_uuid(), new_uuid()
    put_allocation(scheduler, inst, {node: RESOURCES})
    ok(client, "instance_claim", instance_uuid=inst, flavor=FLAVOR)
    bigger = {"VCPU": 2, "MEMORY_MB": 512}
    conductor_moves_to_migration(scheduler, node, inst, mig, {node: bigger})
    ok(
        client,
        "start_move",
        **move(served, mig, inst, "resize", node, node),
        new_flavor={"vcpus": 2, "memory_mb": 512},
    )
    audits(served, 3)
    # During the move both consumers are known: untouched, not reported.
    assert allocations(scheduler, mig) == {node: RESOURCES}
    assert allocations(scheduler, inst) == {node: bigger}
    assert not {inst, mig} & unknown(served)
    ok(client, "confirm_move", migration_uuid=mig)
    audits(served, 3)
    # The agent never deletes the migration consumer: reported until the
    # caller does.
    assert allocations(scheduler, mig) == {node: RESOURCES}
    assert mig in unknown(served)
    assert allocations(scheduler, inst) == {node: bigger}
    scheduler.delete(f"/allocations/{mig}")
    assert mig not in unknown(served)
    ok(client, "abort_instance_claim", instance_uuid=inst)
    audits(served, 2)


def test_revert_at_the_destination_heals_the_instance_there(served, client, scheduler):
    node = served.node_uuid
    inst, mig = new_uuid(), new_uuid()
    # Arriving from another node: the caller allocated the destination (us)
    # to the instance; the migration consumer holds the source (elsewhere).
    put_allocation(scheduler, inst, {node: RESOURCES})
    ok(client, "start_move", **move(served, mig, inst, "migration", OTHER_NODE, node))
    audits(served, 3)
    assert allocations(scheduler, inst) == {node: RESOURCES}
    ok(client, "revert_move", migration_uuid=mig)
    assert ok(client, "get_instance", instance_uuid=inst)["released"] is True
    audits(served, 3)
    assert allocations(scheduler, inst) == {}
    refused(client, "get_instance", "tracker.instance_not_found", instance_uuid=inst)


def test_the_migration_consumer_is_the_callers_at_the_end_of_a_live_migration(
    served, client, scheduler
):
    node = served.node_uuid
    inst, mig = new_uuid(), new_uuid()
    put_allocation(scheduler, inst, {node: RESOURCES})
    ok(client, "instance_claim", instance_uuid=inst, flavor=FLAVOR)
    # Leaving for another node: the instance consumer holds only the
    # destination (not one of ours), the migration consumer our node.
    resp = scheduler.get(f"/allocations/{inst}")
    put_allocation(scheduler, mig, {node: RESOURCES}, consumer_type="MIGRATION")
    scheduler.put(
        f"/allocations/{inst}",
        json={
            "allocations": {},
            "project_id": "proj",
            "user_id": "user",
            "consumer_generation": resp.json()["consumer_generation"],
            "consumer_type": "INSTANCE",
        },
    )
    ok(client, "start_move", **move(served, mig, inst, "live-migration", node, OTHER_NODE))
    assert ok(client, "finish_move", migration_uuid=mig) == {"applied": True}
    record = ok(client, "get_instance", instance_uuid=inst)
    assert (record["claim"], record["moves"]) == (None, [])
    audits(served, 3)
    assert allocations(scheduler, mig) == {node: RESOURCES}
    assert mig in unknown(served)
    scheduler.delete(f"/allocations/{mig}")  # the caller's, at the end
    assert mig not in unknown(served)
    refused(client, "get_instance", "tracker.instance_not_found", instance_uuid=inst)


# -- timeouts ----------------------------------------------------------------


def test_a_standalone_claim_answers_within_three_placement_timeouts(served, scheduler):
    """Documented: one PUT, once more if its connection was lost, then one
    GET, each bounded by ``[placement] timeout``, hence a client timeout
    above 3 x that. Checked as the requests the claim sends while Placement
    hangs (what a loaded machine does not change), not as wall time."""
    inst = new_uuid()
    # Only a hang guard: 10 x what the call takes (3.0 s measured: one
    # held PUT's timeout).
    client = served.client(timeout=10 * PLACEMENT_TIMEOUT_S)
    arrived = len(served.proxy.arrived)
    served.proxy.hold()  # Placement hangs
    try:
        started = time.monotonic()
        reply = bounded_call(
            client,
            60,
            "instance_claim",
            instance_uuid=inst,
            flavor=FLAVOR,
            project_id="p",
            user_id="u",
        )
        assert time.monotonic() - started < 10 * PLACEMENT_TIMEOUT_S
        sent = [m for m, path in served.proxy.arrived[arrived:] if path == f"/allocations/{inst}"]
    finally:
        served.proxy.release()  # the held PUT reaches Placement now
    # At most three waits of [placement] timeout each, as documented.
    assert sent in (["PUT"], ["PUT", "PUT"], ["PUT", "GET"], ["PUT", "PUT", "GET"]), sent
    assert reply["error"]["code"] == "placement.unavailable" and reply["error"]["retriable"]
    # Rolled back, but the write's outcome is unknown: released, so the
    # allocation that landed late is healed.
    record = ok(client, "get_instance", instance_uuid=inst)
    assert (record["claim"], record["released"]) == (None, True)
    deadline = time.monotonic() + 20
    while not allocations(scheduler, inst) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert allocations(scheduler, inst) == {served.node_uuid: RESOURCES}
    audits(served, 3)
    assert allocations(scheduler, inst) == {}
