"""The RPC API over a real RabbitMQ (started by rtagent.testing.rabbitmq),
served by an agent on the libvirt test driver with a real Placement process.

Every client call is bounded (``bounded_call``): a client whose broker is
down can block forever.
"""

import threading
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.rpc import schemas, transport
from rtagent.rpc.client import AgentClient
from rtagent.rpc.endpoint import validate
from rtagent.rpc.errors import InvalidRequest
from rtagent.rpc.transport import get_transport
from rtagent.testing.placement_server import PlacementServer
from tests.functional.conftest import put_allocation
from tests.functional.rpc.harness import ServedAgent, bounded_call, make_conf

pytestmark = pytest.mark.integration

CALL_S = 20


@pytest.fixture(scope="module")
def placement():
    with PlacementServer(db_sync=False) as server:
        yield server


class Holder:
    """The module's agent; a test may restart it (same state directory)."""

    def __init__(self, conf, endpoint):
        self.conf, self.endpoint = conf, endpoint
        self.served = ServedAgent(conf, endpoint)

    def restart(self):
        self.served.stop()
        self.served = ServedAgent(self.conf, self.endpoint)


@pytest.fixture(scope="module")
def agent(broker, placement, tmp_path_factory):
    holder = Holder(
        make_conf(
            str(tmp_path_factory.mktemp("rpc-agent")),
            broker.transport_url,
            cpu_allocation_ratio=64.0,
        ),
        placement.endpoint,
    )
    yield holder
    holder.served.stop()


@pytest.fixture(scope="module")
def client(agent):
    return agent.served.client(timeout=CALL_S)


def call(client, method, **args):
    return bounded_call(client, CALL_S + 5, method, **args)


def ok(client, method, **args):
    reply = call(client, method, **args)
    assert reply["ok"], reply
    return reply["result"]


def new_uuid():
    return str(uuid.uuid4())


def flavor(vcpus=1, memory_mb=512, root_gb=1):
    return {"vcpus": vcpus, "memory_mb": memory_mb, "root_gb": root_gb}


def state_of(agent):
    snap = agent.served.agent.tracker.snapshot()
    return (snap.instances, snap.migrations, snap.disabled, dict(snap.usage))


# -- every method ------------------------------------------------------------


def test_every_method_round_trips(agent, client):
    node = agent.served.node_uuid
    assert ok(client, "ping") == {"host": agent.conf.host, "api_version": transport.API_VERSION}

    inst = new_uuid()
    before = ok(client, "get_compute_node")
    claim = ok(client, "instance_claim", instance_uuid=inst, flavor=flavor(1, 512, 2))
    # Since 1.9 the node's view as the claim left it: the claim counted.
    claimed_view = claim.pop("compute_node")
    assert claimed_view["uuid"] == node
    assert claimed_view["vcpus_used"] == before["vcpus_used"] + 1
    assert claimed_view["memory_mb_used"] == before["memory_mb_used"] + 512
    assert claim == {
        "instance_uuid": inst,
        "node_uuid": node,
        "resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 2},
        "numa": None,
        "pci_devices": [],
    }
    # a retried claim returns the same claim; upper-case UUIDs are the same UUID
    assert (
        ok(client, "instance_claim", instance_uuid=inst.upper(), flavor=flavor(1, 512, 2))[
            "instance_uuid"
        ]
        == inst
    )
    ok(client, "update_instance", instance_uuid=inst, vm_state="active", task_state=None)
    tracked = {i.uuid: i for i in agent.served.agent.tracker.snapshot().instances}
    assert tracked[inst].vm_state == "active"

    ok(client, "build_failed", node_uuid=node)
    assert ok(client, "get_compute_node")["stats"]["failed_builds"] == "1"
    ok(client, "build_succeeded")
    view = ok(client, "get_compute_node", node_uuid=node)
    assert view["uuid"] == node and view["stats"]["failed_builds"] == "0"
    # Later states, later serials, within one incarnation of the agent.
    assert view["revision"]["incarnation"] == claimed_view["revision"]["incarnation"]
    assert view["revision"]["serial"] > claimed_view["revision"]["serial"]
    assert view["host_ip"] == agent.conf.my_ip

    assert ok(client, "set_disabled", disabled=True, reason="maintenance") == {
        "disabled": True,
        "reason": "maintenance",
    }
    assert agent.served.agent.tracker.snapshot().disabled == "maintenance"
    ok(client, "set_disabled", disabled=False)
    assert agent.served.agent.tracker.snapshot().disabled is None

    # a same-node resize: start, finish, confirm
    mig = new_uuid()
    started = ok(
        client,
        "start_move",
        migration_uuid=mig,
        instance_uuid=inst,
        migration_type="resize",
        source_node=node,
        dest_node=node,
        old_flavor=flavor(1, 512, 2),
        new_flavor=flavor(2, 1024, 2),
    )
    assert [m.uuid for m in agent.served.agent.tracker.snapshot().migrations] == [mig]
    # Since 1.9 the node's view as the move left it: a same-node resize
    # holds both flavors until it is confirmed or reverted.
    assert started["compute_node"]["vcpus_used"] == before["vcpus_used"] + 1 + 2
    assert started["compute_node"]["revision"]["serial"] > view["revision"]["serial"]
    assert ok(client, "finish_move", migration_uuid=mig) == {"applied": True}
    assert ok(client, "confirm_move", migration_uuid=mig) == {"applied": True}
    # a second move, reverted
    mig2 = new_uuid()
    ok(
        client,
        "start_move",
        migration_uuid=mig2,
        instance_uuid=inst,
        migration_type="resize",
        source_node=node,
        dest_node=node,
        old_flavor=flavor(2, 1024, 2),
        new_flavor=flavor(1, 512, 2),
    )
    assert ok(client, "revert_move", migration_uuid=mig2) == {"applied": True}
    assert ok(client, "revert_move", migration_uuid=new_uuid()) == {"applied": False}

    status = ok(client, "get_status")
    assert status["node_uuid"] == node
    assert status["instances"] >= 1
    assert set(status["resources"]) >= {"VCPU", "MEMORY_MB", "DISK_GB"}

    assert ok(client, "abort_instance_claim", instance_uuid=inst) == {"released": True}
    assert ok(client, "abort_instance_claim", instance_uuid=inst) == {"released": False}
    assert inst not in {i.uuid for i in agent.served.agent.tracker.snapshot().instances}


def test_typed_errors_for_conditions(agent, client):
    reply = call(client, "get_compute_node", node_uuid=new_uuid())
    assert reply["error"]["code"] == "tracker.node_not_found"
    reply = call(client, "update_instance", instance_uuid=new_uuid(), vm_state="active")
    assert reply["error"]["code"] == "tracker.instance_not_found"
    reply = call(client, "instance_claim", instance_uuid=new_uuid(), flavor=flavor(1, 10**6))
    assert reply["error"]["code"] == "tracker.compute_resources_unavailable"
    assert reply["error"]["details"]["reasons"]
    assert reply["error"]["retriable"] is False
    inst = new_uuid()
    ok(client, "instance_claim", instance_uuid=inst, flavor=flavor())
    reply = call(client, "instance_claim", instance_uuid=inst, flavor=flavor(2))
    assert reply["error"]["code"] == "tracker.instance_claim_conflict"
    ok(client, "abort_instance_claim", instance_uuid=inst)


# -- concurrency -----------------------------------------------------------


def test_eight_conductors_never_oversubscribe(broker, agent):
    tracker = agent.served.agent.tracker
    before = tracker.snapshot()

    def free(rc):
        return before.inventories[rc].capacity - before.usage.get(rc, 0)

    size = 1024
    # Memory binds: the module's agent has a large cpu_allocation_ratio.
    fits = int(min(free("MEMORY_MB") // size, free("VCPU")))
    assert fits >= 10
    granted, refused, lock = [], [], threading.Lock()
    barrier = threading.Barrier(8)

    def conductor():
        transport = get_transport(agent.conf, url=broker.transport_url)
        try:
            client = AgentClient(transport, agent.conf.host, timeout=CALL_S)
            barrier.wait(30)
            # Together they ask for twice what fits.
            for _ in range(fits * 2 // 8 + 1):
                inst = new_uuid()
                reply = call(
                    client, "instance_claim", instance_uuid=inst, flavor=flavor(1, size, 0)
                )
                with lock:
                    if reply["ok"]:
                        granted.append(inst)
                    else:
                        refused.append(reply["error"]["code"])
        finally:
            transport.cleanup()

    threads = [threading.Thread(target=conductor) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    after = tracker.snapshot()
    try:
        # every refusal is the typed "does not fit", and exactly what fits was granted
        assert set(refused) <= {"tracker.compute_resources_unavailable"}
        assert len(granted) == fits, (len(granted), fits, refused[:3])
        for rc, inv in after.inventories.items():
            assert after.usage.get(rc, 0) <= inv.capacity, rc
        assert {i.uuid for i in after.instances} >= set(granted)
        assert after.usage["MEMORY_MB"] - before.usage.get("MEMORY_MB", 0) == fits * size
    finally:
        client = agent.served.client(timeout=CALL_S)
        for inst in granted:
            ok(client, "abort_instance_claim", instance_uuid=inst)


# -- malformed calls ----------------------------------------------------------

_UUID = st.uuids().map(str)
_JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


def _valid_args(method):
    """A strategy of valid arguments for ``method`` (to be broken below)."""
    f = st.fixed_dictionaries(
        {"vcpus": st.integers(1, 4), "memory_mb": st.integers(1, 2048)},
        optional={"root_gb": st.integers(0, 5), "name": st.text(max_size=8)},
    )
    common = {
        "instance_claim": {"instance_uuid": _UUID, "flavor": f},
        "abort_instance_claim": {"instance_uuid": _UUID},
        "update_instance": {"instance_uuid": _UUID},
        "start_move": {
            "migration_uuid": _UUID,
            "instance_uuid": _UUID,
            "migration_type": st.sampled_from(schemas.MOVE_TYPES),
            "source_node": _UUID,
            "dest_node": _UUID,
            "old_flavor": f,
        },
        "finish_move": {"migration_uuid": _UUID},
        "confirm_move": {"migration_uuid": _UUID},
        "revert_move": {"migration_uuid": _UUID},
        "set_disabled": {"disabled": st.booleans()},
    }.get(method, {})
    return st.fixed_dictionaries(common)


_CALLER_PARAMETERS = {"client", "seconds", "method", "ctxt", "self"}


@st.composite
def malformed_calls(draw):
    """(method, args) that the method's schema rejects."""
    method = draw(st.sampled_from(sorted(set(schemas.METHODS) - {"ping"})))
    args = dict(draw(_valid_args(method)))
    how = draw(st.sampled_from(["drop", "junk", "extra", "bad_uuid", "size", "nested"]))
    keys = sorted(args)
    if how == "drop" and keys:
        del args[draw(st.sampled_from(keys))]
    elif how == "junk" and keys:
        args[draw(st.sampled_from(keys))] = draw(_JUNK)
    elif how == "bad_uuid":
        key = draw(st.sampled_from([*[k for k in keys if "uuid" in k or "node" in k], "node_uuid"]))
        args[key] = draw(
            st.one_of(
                st.text(max_size=40), _UUID.map(lambda u: u[:-1]), _UUID.map(lambda u: u + "0")
            )
        )
    elif how == "size" and ("flavor" in args or "old_flavor" in args):
        key = "flavor" if "flavor" in args else "old_flavor"
        field = draw(st.sampled_from(["vcpus", "memory_mb", "root_gb", "swap_mb"]))
        args[key] = {
            **args[key],
            field: draw(st.sampled_from([-1, 0, 2**31, 2**63, 1.5, "1", True])),
        }
    elif how == "nested" and "flavor" in args:
        args["flavor"] = {**args["flavor"], draw(st.text(min_size=1, max_size=8)): 1}
    else:
        # Not the parameter names of the calls that send it (this module's
        # call(), bounded_call(), oslo.messaging's call(ctxt, method)): a
        # Python caller cannot pass those as keyword arguments at all.
        name = st.text(min_size=1, max_size=12).filter(
            lambda k: k not in args and k not in _CALLER_PARAMETERS
        )
        args[draw(name)] = draw(_JUNK)
    try:
        validate(method, args)
    except InvalidRequest:
        return method, args
    # The mutation happened to leave the call valid (e.g. swap_mb=0): make
    # it invalid for sure.
    args["unexpected_argument"] = 1
    return method, args


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(case=malformed_calls())
def test_malformed_calls_get_the_typed_error_and_change_nothing(agent, client, case):
    method, args = case
    before = state_of(agent)
    reply = call(client, method, **args)
    assert reply["ok"] is False
    assert reply["error"]["code"] == "rpc.invalid_request", reply
    assert set(reply["error"]) == {"code", "message", "retriable", "details"}
    assert state_of(agent) == before


# -- restarts ----------------------------------------------------------------


def test_broker_restart_is_survived_and_acknowledged_claims_kept(broker, agent):
    """Conductors claim while the broker restarts; every claim acknowledged
    to them is in the tracker afterwards, and the server serves again."""
    acknowledged, unknown, refused, lock = [], [], [], threading.Lock()
    stop = threading.Event()

    def conductor():
        transport = get_transport(agent.conf, url=broker.transport_url)
        client = AgentClient(transport, agent.conf.host, timeout=3, retry=3)
        try:
            while not stop.is_set():
                inst = new_uuid()
                try:
                    reply = bounded_call(
                        client, 30, "instance_claim", instance_uuid=inst, flavor=flavor(1, 16, 0)
                    )
                except Exception:
                    with lock:
                        unknown.append(inst)  # the outcome is unknown to the caller
                    time.sleep(0.2)
                    continue
                with lock:
                    (acknowledged if reply["ok"] else refused).append(
                        inst if reply["ok"] else reply["error"]["code"]
                    )
                # Paced so that the host (128 VCPU) is not filled before the
                # restart: a full host refuses every claim, and the test
                # would then see no acknowledgements after it.
                time.sleep(0.1)
        finally:
            transport.cleanup()

    def served():
        with lock:
            return len(acknowledged) + len(refused)

    threads = [threading.Thread(target=conductor, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    before_restart, acked_before = served(), len(acknowledged)
    broker.restart(down_seconds=1.0)
    # The server reconnects a few seconds after the broker is back; a call
    # in that gap may time out (RPC queues are not durable).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and served() <= before_restart + 10:
        time.sleep(0.5)
    stop.set()
    for t in threads:
        t.join(60)
    client = agent.served.client(timeout=CALL_S)
    try:
        assert before_restart > 0
        assert served() > before_restart + 10, "no claims served after the restart"
        assert len(acknowledged) > acked_before, "no claim acknowledged after the restart"
        assert set(refused) <= {"tracker.compute_resources_unavailable"}, refused
        held = {i.uuid for i in agent.served.agent.tracker.snapshot().instances}
        assert set(acknowledged) <= held
    finally:
        for inst in acknowledged + unknown:
            call(client, "abort_instance_claim", instance_uuid=inst)


def test_agent_restart_keeps_acknowledged_claims(agent):
    client = agent.served.client(timeout=CALL_S)
    claimed = [new_uuid() for _ in range(5)]
    for inst in claimed:
        ok(client, "instance_claim", instance_uuid=inst, flavor=flavor(1, 256, 1))
    usage = dict(agent.served.agent.tracker.snapshot().usage)
    agent.restart()
    client = agent.served.client(timeout=CALL_S)
    snap = agent.served.agent.tracker.snapshot()
    assert set(claimed) <= {i.uuid for i in snap.instances}
    assert dict(snap.usage) == usage
    status = ok(client, "get_status")
    assert status["instances"] == len(snap.instances)
    for inst in claimed:
        assert ok(client, "abort_instance_claim", instance_uuid=inst) == {"released": True}


def test_standalone_claims_write_their_allocation_or_roll_back(agent, placement):
    # A client of the agent as it is now (an earlier test may restart it).
    client = agent.served.client(timeout=CALL_S)
    admin = placement.admin_adapter()
    node = agent.served.node_uuid
    uid = new_uuid()
    result = ok(
        client,
        "instance_claim",
        instance_uuid=uid,
        flavor=flavor(1, 256, 1),
        project_id="p",
        user_id="u",
    )
    assert result["resources"] == {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}
    held = admin.get(f"/allocations/{uid}").json()["allocations"]
    assert held[node]["resources"] == result["resources"]

    # Placement refuses: someone else already holds other allocations for it.
    other = new_uuid()
    put_allocation(admin, other, {node: {"VCPU": 1}})
    reply = call(
        client, "instance_claim", instance_uuid=other, flavor=flavor(2, 256, 1), user_id="u"
    )
    assert not reply["ok"] and reply["error"]["code"] == "placement.allocation_refused"
    assert other not in {i.uuid for i in agent.served.agent.tracker.snapshot().instances}
    ok(client, "abort_instance_claim", instance_uuid=uid)
