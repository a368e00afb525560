"""The shortcuts that keep a claim's cost independent of N give the same
answers as the full computations they replace: the store writes of
``changes`` (Table history) and the usage a fit is checked against (carried
sums). Pure NodeState values, no mocks."""

import pytest

from rtagent.resources import MEMORY_MB, VCPU, frozen_map
from rtagent.tracker import assigned, claims, ledger, moves
from rtagent.tracker.fits import FitContext
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor, Instance, Migration
from rtagent.tracker.state import NodeState
from rtagent.tracker.table import MAX_HISTORY, Table
from rtagent.tracker.writes import changes
from rtagent.virt.host import HostView

A = "00000000-0000-0000-0000-00000000000a"
B = "00000000-0000-0000-0000-00000000000b"
HOST = HostView("h", "QEMU", 1, vcpus=64, memory_mb=262144, local_gb=1000)
INVENTORIES = frozen_map(ledger.inventories(HOST, ResourcePolicy(reserved_host_memory_mb=0)))
OFFERED = frozen_map({"CUSTOM_VGPU": ("g0", "g1", "g2", "g3", "g4", "g5")})
CTX = FitContext(inventories=INVENTORIES, offered=OFFERED)
SMALL, LARGE = Flavor(1, 512), Flavor(4, 4096, root_gb=10)


def uid(i):
    return f"11111111-1111-1111-1111-{i:012d}"


def res(flavor):
    return frozen_map(ledger.requested_resources(flavor))


def instance(i, flavor=SMALL):
    return Instance(uid(i), flavor, res(flavor), vm_state="active")


def migration(n, i, source, dest, old=SMALL, new=LARGE, **kw):
    return Migration(
        uid(100 + n), uid(i), "resize", source, dest, old, new, res(old), res(new), **kw
    )


def full_changes(old, new):
    """What ``changes`` wrote before the shortcut: every entry compared."""

    def put(a, b):
        return tuple(v for k, v in sorted(b.items()) if a.get(k) != v)

    return (
        put(old.instances, new.instances),
        tuple(sorted(set(old.instances) - set(new.instances))),
        put(old.migrations, new.migrations),
        tuple(sorted(set(old.migrations) - set(new.migrations))),
        tuple(sorted(new.released - old.released)),
        tuple(sorted(old.released - new.released)),
    )


def as_tuple(delta):
    return (
        delta.put_instances,
        delta.delete_instances,
        delta.put_migrations,
        delta.delete_migrations,
        delta.put_released,
        delta.delete_released,
    )


def node_with(count):
    state = NodeState(A, inventories=INVENTORIES, offered=OFFERED)
    for i in range(count):
        state = claims.claim_instance(state, CTX, instance(i))
    return state


# -- Table --------------------------------------------------------------


def test_a_table_is_a_read_only_mapping_and_old_versions_stay():
    one = Table({"a": 1})
    two = one.set("b", 2)
    three = two.without(["a", "missing"])
    assert dict(one) == {"a": 1} and dict(two) == {"a": 1, "b": 2} and dict(three) == {"b": 2}
    assert two == {"a": 1, "b": 2} and two == Table({"b": 2, "a": 1})
    assert three.without(["a"]) is three
    with pytest.raises(TypeError):
        two["c"] = 3


def test_a_table_knows_what_changed_since_a_recent_version_only():
    base = Table({"a": 1, "b": 2})
    latest = base
    for i in range(MAX_HISTORY):
        latest = latest.set(f"k{i}", i)
    assert latest.touched_since(base) == {f"k{i}" for i in range(MAX_HISTORY)}
    assert latest.set("a", 9).without(["b"]).touched_since(latest) == {"a", "b"}
    # Further back, or unrelated: unknown (callers compare every entry).
    assert latest.set("x", 0).touched_since(base) is None
    assert latest.touched_since(Table({"a": 1, "b": 2})) is None


# -- changes: the shortcut writes what a full comparison writes -----------

OPERATIONS = {
    "claim": lambda s: claims.claim_instance(s, CTX, instance(500)),
    "claim with assigned": lambda s: claims.claim_instance(
        s, CTX, instance(501), assigned_request={"CUSTOM_VGPU": 2}
    ),
    "two claims": lambda s: claims.claim_instance(
        claims.claim_instance(s, CTX, instance(502)), CTX, instance(503)
    ),
    "repeat claim": lambda s: claims.claim_instance(s, CTX, instance(3)),
    "abort": lambda s: claims.remove_instance(s, uid(3)),
    "abort unknown": lambda s: claims.remove_instance(s, uid(999)),
    "update": lambda s: claims.update_instance(s, uid(4), task_state="spawning"),
    "delete": lambda s: claims.update_instance(s, uid(5), vm_state="deleted"),
    "claim back a released one": lambda s: claims.claim_instance(
        claims.remove_instance(s, uid(6)), CTX, instance(6)
    ),
    "same-node resize": lambda s: moves.start_move(s, CTX, migration(1, 7, A, A)),
    "resize away and confirm": lambda s: moves.confirm_move(
        moves.finish_move(moves.start_move(s, None, migration(2, 8, A, B)), uid(102)), uid(102)
    ),
    "incoming then revert": lambda s: moves.revert_move(
        moves.start_move(s, CTX, migration(3, 600, B, A)), uid(103)
    ),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
@pytest.mark.parametrize("size", [10, 40])
def test_changes_match_a_full_comparison(name, size):
    state = node_with(size)
    new = OPERATIONS[name](state)
    assert as_tuple(changes(state, new)) == full_changes(state, new)
    # Either way round, and between states built apart (no shared history).
    assert as_tuple(changes(new, state)) == full_changes(new, state)
    rebuilt = NodeState(A, instances=dict(new.instances), migrations=dict(new.migrations))
    assert as_tuple(changes(state, rebuilt))[:4] == full_changes(state, rebuilt)[:4]


def test_a_long_run_of_claims_writes_one_row_each():
    state = node_with(5)
    for i in range(3 * MAX_HISTORY):
        new = claims.claim_instance(state, CTX, instance(1000 + i))
        assert changes(state, new).put_instances == (new.instances[uid(1000 + i)],)
        state = new


# -- usage: carried sums agree with adding up every holding ----------------


def states_with_moves():
    base = node_with(12)
    base = claims.claim_instance(base, CTX, instance(50), assigned_request={"CUSTOM_VGPU": 2})
    yield "plain", base
    yield "same-node resize", moves.start_move(base, CTX, migration(1, 1, A, A))
    yield (
        "same-node resize of one with assigned",
        moves.start_move(base, CTX, migration(2, 50, A, A), assigned_request={"CUSTOM_VGPU": 1}),
    )
    yield "incoming", moves.start_move(base, CTX, migration(3, 700, B, A))
    outgoing = moves.finish_move(moves.start_move(base, None, migration(4, 2, A, B)), uid(104))
    yield "outgoing after the instance left", outgoing
    twice = moves.start_move(base, CTX, migration(5, 3, A, A, seq=0))
    yield "two moves of one instance", twice.with_migration(migration(6, 3, A, A, new=SMALL))
    yield "aborted", claims.remove_instance(base, uid(50))


@pytest.mark.parametrize("name, state", list(states_with_moves()))
def test_used_and_ids_match_the_holdings(name, state):
    extra = [{VCPU: 2, MEMORY_MB: 100}]
    full = ledger.usage(state.held(), extra)
    fast = state.used(extra)
    for rc in set(full) | set(fast):
        assert fast.get(rc, 0) == full.get(rc, 0), (name, rc)
    assert state.ids_in_use() == {
        rc: ids for rc, ids in assigned.in_use(state.held()).items() if ids
    }
    # The carried sums are the sums of this very mapping.
    fresh = NodeState(A, instances=dict(state.instances), migrations=dict(state.migrations))
    assert dict(fresh.sums.amounts) == {k: v for k, v in state.sums.amounts.items() if v}
