"""A kept-alive connection that dies before its answer, for real.

A real Placement process over HTTP on loopback, behind
:class:`rtagent.testing.faultproxy.FaultProxy`, the keep-alive front that
closes (or resets) a client's pooled connection as it is reused, as a
front's idle timeout does. No mocks: the failure is a real socket closing
under keystoneauth, requests and urllib3.
"""

import logging
import socket
import threading
import uuid

import pytest

from rtagent.placement import errors, standalone
from rtagent.placement.client import PlacementClient
from rtagent.placement.passes.heal import AllocationHealer
from rtagent.placement.sync import ProviderSync
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.service import builder
from rtagent.service.prometheus import Metrics
from rtagent.testing.faultproxy import CLOSE, FORWARDED, RESET, FaultProxy
from rtagent.testing.placement_server import PlacementServer, admin_adapter
from tests.functional.placement.conftest import allocations_of, get, make_provider, put_allocation

pytestmark = [pytest.mark.functional, pytest.mark.timeout(120)]

AVX2 = "HW_CPU_X86_AVX2"  # a standard trait: the sync writes it without creating it first


@pytest.fixture(scope="module")
def placement_process():
    # One for the module: only one test registers the demo hypervisor's name.
    with PlacementServer(db_sync=False) as server:
        yield server


@pytest.fixture
def operator(placement_process):
    """Straight to Placement, not through the proxy."""
    return admin_adapter(placement_process.endpoint)


@pytest.fixture
def proxy(placement_process):
    with FaultProxy(placement_process.endpoint) as proxy:
        yield proxy


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def client(proxy, metrics):
    """Our client through the proxy, counted by the real metrics."""
    return PlacementClient(admin_adapter(proxy.endpoint), metrics.observer())


def sample(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels) or 0


def retries(metrics, method):
    return sample(metrics, "rtagent_placement_retries_total", method=method)


def requests_of(metrics, method, status):
    return sample(metrics, "rtagent_placement_requests_total", method=method, status=status)


def seen(proxy):
    """(connection, method, path without query, outcome) per request."""
    return [(e.connection, e.method, e.path.split("?")[0], e.outcome) for e in proxy.exchanges]


def new_provider(operator):
    return make_provider(operator, f"rp-{uuid.uuid4()}")


@pytest.mark.parametrize("mode", [CLOSE, RESET])
def test_get_on_a_stale_connection_is_sent_again_on_a_fresh_one(
    client, proxy, operator, metrics, mode, caplog
):
    rp = new_provider(operator)
    assert [p["uuid"] for p in client.list_tree(rp)] == [rp]  # connection 1, kept alive
    proxy.drop_next_reused(mode=mode)

    with caplog.at_level(logging.INFO, logger="rtagent.placement.client"):
        assert client.get_inventories(rp) == (0, {})

    inventories = f"/resource_providers/{rp}/inventories"
    assert seen(proxy) == [
        (1, "GET", "/resource_providers", FORWARDED),
        (1, "GET", inventories, mode),  # went out, connection ended, no answer
        (2, "GET", inventories, FORWARDED),  # once more, on a new connection
    ]
    assert retries(metrics, "GET") == 1
    assert requests_of(metrics, "GET", "error") == 1
    assert requests_of(metrics, "GET", "200") == 2
    logged = [r for r in caplog.records if "again on another connection" in r.getMessage()]
    assert [r.levelname for r in logged] == ["WARNING"]
    assert inventories in logged[0].getMessage()


def test_agent_audit_survives_a_stale_connection(proxy, metrics, make_conf):
    """The benchmark's failure: the tick's one read lands on a pooled
    connection that just died. It used to fail the audit (and put the node
    into backoff in the daemon)."""
    agent = builder.build_agent(
        make_conf(), adapter=admin_adapter(proxy.endpoint), observer=metrics.observer()
    )
    try:
        agent.audit()  # registers the node over kept-alive connections
        proxy.clear()
        proxy.drop_next_reused()

        result = agent.audit()

        status = agent.sync_status()[agent.tracker.node_uuid]
    finally:
        agent.close()
    assert result.sync.operations == ()
    assert status["in_sync"] and status["last_error"] is None
    (dropped_on, *_), (sent_on, *_) = seen(proxy)
    assert seen(proxy) == [
        (dropped_on, "GET", "/resource_providers", CLOSE),
        (sent_on, "GET", "/resource_providers", FORWARDED),
    ]
    assert sent_on == proxy.connections > dropped_on
    assert retries(metrics, "GET") == 1


def test_a_landed_put_whose_answer_was_lost_is_a_conflict_the_sync_resolves(
    client, proxy, operator, metrics
):
    """A retried PUT that had landed gets 409: the sync re-reads that
    provider, finds its write there, and is done."""
    rp = new_provider(operator)
    sync = ProviderSync(client)
    desired = ProviderTree([Provider(rp, get(operator, f"/resource_providers/{rp}")["name"])])
    sync.sync(desired)
    proxy.clear()
    proxy.drop_next_reused(forward=True, method="PUT")

    result = sync.sync(
        ProviderTree(
            [desired.get(rp).replace(traits=frozenset({AVX2}), managed_traits=frozenset({AVX2}))]
        )
    )

    traits = f"/resource_providers/{rp}/traits"
    assert [(m, p, o) for _, m, p, o in seen(proxy)] == [
        ("GET", "/resource_providers", FORWARDED),
        ("PUT", traits, CLOSE),  # it reached Placement; its answer was lost
        ("PUT", traits, FORWARDED),  # the retry: 409, our generation is stale
        ("GET", f"/resource_providers/{rp}/inventories", FORWARDED),
        ("GET", traits, FORWARDED),  # nothing left to write
    ]
    assert proxy.exchanges[1].reached_server
    assert result.attempts == 2
    assert get(operator, traits)["traits"] == [AVX2]
    assert retries(metrics, "PUT") == 1
    assert requests_of(metrics, "PUT", "409") == 1


def test_a_landed_standalone_write_whose_answer_was_lost_counts_as_present(
    client, proxy, operator, metrics
):
    rp = make_provider(operator, f"rp-{uuid.uuid4()}", inventories={"VCPU": {"total": 4}})
    client.list_tree(rp)  # opens the connection that will go stale
    consumer = str(uuid.uuid4())
    proxy.drop_next_reused(forward=True, method="PUT")

    outcome = standalone.write_allocations(
        client, consumer, {rp: {"VCPU": 1}}, project_id="p", user_id="u", consumer_type="INSTANCE"
    )

    assert outcome == standalone.PRESENT  # the retry's 409, then one GET: identical
    assert allocations_of(operator, consumer) == {rp: {"VCPU": 1}}
    assert retries(metrics, "PUT") == 1


def test_a_landed_heal_whose_answer_was_lost_is_done_on_the_next_pass(
    client, proxy, operator, metrics
):
    rp = make_provider(operator, f"rp-{uuid.uuid4()}", inventories={"VCPU": {"total": 4}})
    consumer = str(uuid.uuid4())
    put_allocation(operator, consumer, {rp: {"VCPU": 1}})
    healer = AllocationHealer(client)
    assert healer.heal([consumer], [rp]).pending == {consumer}
    proxy.drop_next_reused(forward=True, method="PUT")

    lost = healer.heal([consumer], [rp])
    after = healer.heal([consumer], [rp])

    assert lost.conflicts == {consumer}  # the retry's 409: look again
    assert after.healed == {consumer} and after.removed == {}
    assert allocations_of(operator, consumer) == {}
    assert retries(metrics, "PUT") == 1


@pytest.mark.parametrize("forward", [False, True], ids=["dropped", "landed"])
def test_post_is_never_sent_twice(client, proxy, operator, metrics, forward):
    """A POST may have landed: sending it again could create twice or, for
    a provider, fail on its own name. It fails as before."""
    client.list_tree(str(uuid.uuid4()))  # opens the connection that will go stale
    rp, name = str(uuid.uuid4()), f"rp-{uuid.uuid4()}"
    proxy.drop_next_reused(forward=forward)

    with pytest.raises(errors.PlacementUnavailable):
        client.create_provider(rp, name)

    assert [(m, o) for _, m, _, o in seen(proxy)] == [("GET", FORWARDED), ("POST", CLOSE)]
    created = operator.get(f"/resource_providers/{rp}").status_code == 200
    assert created is forward
    assert retries(metrics, "POST") == 0
    assert requests_of(metrics, "POST", "error") == 1


@pytest.fixture
def refused_endpoint():
    """A loopback port that refuses connections: bound by us, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_refused_twice_raises_after_exactly_two_attempts(refused_endpoint, metrics):
    client = PlacementClient(admin_adapter(refused_endpoint), metrics.observer())

    with pytest.raises(errors.PlacementUnavailable, match="refused"):
        client.list_tree(str(uuid.uuid4()))
    with pytest.raises(errors.PlacementUnavailable, match="refused"):
        client.create_provider(str(uuid.uuid4()), "never")

    assert requests_of(metrics, "GET", "error") == 2
    assert retries(metrics, "GET") == 1
    assert requests_of(metrics, "POST", "error") == 1
    assert retries(metrics, "POST") == 0


def test_proxy_stops_with_idle_connections_open(placement_process):
    before = set(threading.enumerate())
    proxy = FaultProxy(placement_process.endpoint)
    proxy.start()
    adapters = [admin_adapter(proxy.endpoint) for _ in range(3)]
    for adapter in adapters:
        assert adapter.get("/").status_code == 200  # each keeps its connection open
    assert proxy.connections == 3

    proxy.stop()

    assert set(threading.enumerate()) <= before
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
    proxy.stop()  # idempotent
