"""Issue 10: moves never make a node hold more than was fit-checked, a
reused migration UUID is refused, and an instance that moves back is no
longer a consumer healing may remove. Pure NodeState values, no mocks."""

import pytest

from rtagent.resources import MEMORY_MB, frozen_map
from rtagent.tracker import claims, errors, ledger, moves
from rtagent.tracker.fits import FitContext
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor, Instance, Migration
from rtagent.tracker.state import NodeState
from rtagent.virt.host import HostView

A = "00000000-0000-0000-0000-00000000000a"
B = "00000000-0000-0000-0000-00000000000b"
INST = "11111111-1111-1111-1111-111111111111"
OTHER = "33333333-3333-3333-3333-333333333333"
MIG = "22222222-2222-2222-2222-222222222222"
MIG2 = "44444444-4444-4444-4444-444444444444"

HOST = HostView("h", "QEMU", 1, vcpus=8, memory_mb=30720, local_gb=100)
INVENTORIES = frozen_map(ledger.inventories(HOST, ResourcePolicy(reserved_host_memory_mb=0)))
CTX = FitContext(inventories=INVENTORIES)
TINY = Flavor(1, 512)
HUGE = Flavor(1, 30000)


def res(flavor):
    return frozen_map(ledger.requested_resources(flavor))


def move(kind, source, dest, old, new, uuid=MIG, instance=INST):
    return Migration(uuid, instance, kind, source, dest, old, new, res(old), res(new))


def holding(node, flavor=TINY, uuid=INST):
    state = NodeState(node, inventories=INVENTORIES)
    return state.with_instance(Instance(uuid, flavor, res(flavor), vm_state="active"))


def used_memory(state):
    return ledger.usage(state.held())[MEMORY_MB]


# -- item 8: a move fit-checks exactly what the node will hold --------------


@pytest.mark.parametrize(
    "name, node, asked",
    [
        # claim 512 MiB, then "resize" it same-node from 30000 to 30000
        ("same-node resize, inflated old flavor", A, move("resize", A, A, HUGE, HUGE)),
        ("same-node resize, inflated old, small new", A, move("resize", A, A, HUGE, TINY)),
        ("outgoing resize, inflated old flavor", A, move("resize", A, B, HUGE, TINY)),
        ("outgoing migration, inflated old flavor", A, move("migration", A, B, HUGE, HUGE)),
    ],
)
def test_an_old_flavor_that_is_not_the_tracked_one_is_refused(name, node, asked):
    state = holding(node)
    with pytest.raises(errors.InvalidClaimRequest, match="old_flavor"):
        moves.start_move(state, CTX, asked)


def test_a_same_node_resize_holds_exactly_what_was_checked():
    """Every step of a same-node resize stays within capacity; the new
    flavor checked at start is what the node holds beside the old one."""
    state = holding(A, Flavor(1, 10000))
    big = move("resize", A, A, Flavor(1, 10000), Flavor(1, 20000))
    # 10000 held, 20000 more needed: 30000 of 30720 fits
    state = moves.start_move(state, CTX, big)
    assert used_memory(state) == 30000
    for step in (moves.finish_move, moves.confirm_move):
        state = step(state, MIG)
        assert used_memory(state) <= INVENTORIES[MEMORY_MB].capacity
    assert used_memory(state) == 20000
    # 20000 held: a same-node resize to 20000 more no longer fits
    again = move("resize", A, A, Flavor(1, 20000), Flavor(1, 20000), uuid=MIG2)
    with pytest.raises(errors.ComputeResourcesUnavailable):
        moves.start_move(state, CTX, again)


def test_the_tracked_old_flavor_is_recorded_not_the_callers_name():
    state = holding(A, Flavor(1, 512, name="m1.tiny"))
    state = moves.start_move(state, CTX, move("resize", A, B, Flavor(1, 512, name="x"), TINY))
    assert state.migrations[MIG].old_flavor.name == "m1.tiny"


# -- item 11: a reused migration UUID --------------------------------------


@pytest.mark.parametrize(
    "name, again",
    [
        ("another instance", move("resize", A, B, TINY, Flavor(2, 1024), instance=OTHER)),
        ("another new flavor", move("resize", A, B, TINY, Flavor(1, 2048))),
        ("another type", move("migration", A, B, TINY, Flavor(2, 1024))),
        ("another destination", move("resize", A, OTHER, TINY, Flavor(2, 1024))),
    ],
)
def test_a_repeated_start_that_differs_is_refused(name, again):
    state = holding(A).with_instance(Instance(OTHER, TINY, res(TINY), vm_state="active"))
    state = moves.start_move(state, CTX, move("resize", A, B, TINY, Flavor(2, 1024)))
    with pytest.raises(errors.MoveConflict):
        moves.start_move(state, CTX, again)


def test_a_repeated_identical_start_is_harmless():
    state = holding(A)
    first = moves.start_move(state, CTX, move("resize", A, B, TINY, Flavor(2, 1024)))
    assert moves.start_move(first, CTX, move("resize", A, B, TINY, Flavor(2, 1024))) is first


# -- item 1: one definition of the consumers a node knows --------------------


def test_an_instance_moving_back_is_no_longer_healable():
    """A -> B live migration finishes at A (the instance is released there);
    within a tick it starts moving back B -> A: A must not heal it."""
    state = holding(A)
    state = moves.start_move(state, None, move("live-migration", A, B, TINY, TINY))
    state = moves.finish_move(state, MIG)
    assert INST in state.released and INST in state.healable()
    state = moves.start_move(state, CTX, move("live-migration", B, A, TINY, TINY, uuid=MIG2))
    assert INST not in state.released
    assert INST not in state.healable()
    assert {INST, MIG2} <= state.known_consumers()


def test_healable_excludes_every_active_consumer():
    """Even a released record that an active consumer shares is not healable."""
    state = holding(A).replace(released=frozenset({INST, OTHER}))
    assert state.healable() == {OTHER}
    assert state.known_consumers() == {INST, OTHER}


# -- item 9: a pending standalone claim ---------------------------------------


def test_a_pending_claim_refuses_other_calls_and_only_its_token_removes_it():
    state = NodeState(A, host=HOST, inventories=INVENTORIES)
    inst = Instance(INST, TINY, res(TINY))
    state = claims.claim_instance(state, CTX, inst).with_pending(INST, 7)
    with pytest.raises(errors.ClaimPending):
        claims.claim_instance(state, CTX, inst)  # the same claim, another caller
    with pytest.raises(errors.ClaimPending):
        claims.remove_instance(state, INST)
    with pytest.raises(errors.ClaimPending):
        claims.update_instance(state, INST, vm_state="deleted")
    with pytest.raises(errors.ClaimPending):
        moves.start_move(state, CTX, move("resize", A, A, TINY, Flavor(2, 512)))
    with pytest.raises(errors.ClaimPending):
        claims.remove_instance(state, INST, token=8)
    gone = claims.remove_instance(state, INST, token=7)
    assert INST not in gone.instances and not gone.pending


@pytest.mark.parametrize("undo", ["revert", "stale"])
def test_a_move_back_that_never_lands_releases_the_instance_again(undo):
    """The move back made the instance active at A; if it ends without the
    instance living at A (reverted, or dropped as stale by the instance's
    migration context), its allocation at A is dead again: healable."""
    state = holding(A)
    state = moves.start_move(state, None, move("live-migration", A, B, TINY, TINY))
    state = moves.finish_move(state, MIG)
    state = state.forget_released([INST])  # healed meanwhile, say
    state = moves.start_move(state, CTX, move("migration", B, A, TINY, TINY, uuid=MIG2))
    assert INST not in state.healable()
    if undo == "revert":
        state = moves.revert_move(state, MIG2)
    else:
        state, _ = moves.drop_stale(state, INST, None)
    assert INST in state.healable()
