"""Table-driven tests of the pure move transitions and their accounting on
both nodes. No mocks, no store: NodeState values in, NodeState values out."""

import pytest

from rtagent.resources import DISK_GB, MEMORY_MB, VCPU, frozen_map
from rtagent.tracker import claims, errors, ledger, moves
from rtagent.tracker.fits import FitContext
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.model import Flavor, Instance, Migration
from rtagent.tracker.state import NodeState
from rtagent.virt.host import HostView

SRC = "00000000-0000-0000-0000-00000000000a"
DST = "00000000-0000-0000-0000-00000000000b"
INST = "11111111-1111-1111-1111-111111111111"
MIG = "22222222-2222-2222-2222-222222222222"

SMALL = Flavor(2, 2048, 20)
LARGE = Flavor(4, 4096, 40)
HOST = HostView("h", "QEMU", 1, vcpus=8, memory_mb=8192, local_gb=100)
CTX = FitContext(
    inventories=frozen_map(
        ledger.inventories(
            HOST, ResourcePolicy(reserved_host_memory_mb=0, ratios=frozen_map({VCPU: 1.0}))
        )
    )
)


def res(flavor):
    return frozen_map(ledger.requested_resources(flavor))


def used(state):
    return ledger.usage(state.held())


def as_tuple(u):
    return (u[VCPU], u[MEMORY_MB], u[DISK_GB])


def instance(flavor=SMALL, uuid=INST):
    return Instance(uuid, flavor, res(flavor), vm_state="active")


def migration(kind, source, dest, old=SMALL, new=SMALL, uuid=MIG):
    return Migration(uuid, INST, kind, source, dest, old, new, res(old), res(new))


def on(node, *instances):
    state = NodeState(node)
    for i in instances:
        state = state.with_instance(i)
    return state


def run(state, steps):
    """Apply named steps: start is fed the move, others its UUID."""
    for step, arg in steps:
        if step == "start":
            state = moves.start_move(state, CTX, arg)
        else:
            state = getattr(moves, f"{step}_move")(state, arg)
    return state


RESIZE_SRC = migration("resize", SRC, DST, SMALL, LARGE)
RESIZE_SAME = migration("resize", SRC, SRC, SMALL, LARGE)
SHRINK_SAME = migration("resize", SRC, SRC, LARGE, SMALL)
LIVE = migration("live-migration", SRC, DST)
EVAC = migration("evacuation", SRC, DST)
COLD = migration("migration", SRC, DST)


@pytest.mark.parametrize(
    "name, node, start, steps, expected, instance_here",
    [
        # cross-node resize, destination side
        ("dest claims new flavor", DST, on(DST), [("start", RESIZE_SRC)], (4, 4096, 40), False),
        (
            "dest finish: instance is ours",
            DST,
            on(DST),
            [("start", RESIZE_SRC), ("finish", MIG)],
            (4, 4096, 40),
            True,
        ),
        (
            "dest confirm keeps it",
            DST,
            on(DST),
            [("start", RESIZE_SRC), ("finish", MIG), ("confirm", MIG)],
            (4, 4096, 40),
            True,
        ),
        (
            "dest revert frees it",
            DST,
            on(DST),
            [("start", RESIZE_SRC), ("finish", MIG), ("revert", MIG)],
            (0, 0, 0),
            False,
        ),
        (
            "dest revert before finish",
            DST,
            on(DST),
            [("start", RESIZE_SRC), ("revert", MIG)],
            (0, 0, 0),
            False,
        ),
        # cross-node resize, source side
        (
            "source keeps old until finish",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SRC)],
            (2, 2048, 20),
            True,
        ),
        (
            "source keeps old after finish",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SRC), ("finish", MIG)],
            (2, 2048, 20),
            False,
        ),
        (
            "source confirm frees old",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SRC), ("finish", MIG), ("confirm", MIG)],
            (0, 0, 0),
            False,
        ),
        (
            "source revert takes it back",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SRC), ("finish", MIG), ("revert", MIG)],
            (2, 2048, 20),
            True,
        ),
        # a same-node resize holds both flavors until confirm/revert (the
        # host holds both; Placement and nova's tracker count both)
        ("same-node grow", SRC, on(SRC, instance()), [("start", RESIZE_SAME)], (6, 6144, 60), True),
        (
            "same-node grow finished",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SAME), ("finish", MIG)],
            (6, 6144, 60),
            True,
        ),
        (
            "same-node grow confirmed",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SAME), ("finish", MIG), ("confirm", MIG)],
            (4, 4096, 40),
            True,
        ),
        (
            "same-node grow reverted",
            SRC,
            on(SRC, instance()),
            [("start", RESIZE_SAME), ("finish", MIG), ("revert", MIG)],
            (2, 2048, 20),
            True,
        ),
        (
            "same-node shrink holds both",
            SRC,
            on(SRC, instance(LARGE)),
            [("start", SHRINK_SAME), ("finish", MIG)],
            (6, 6144, 60),
            True,
        ),
        (
            "same-node shrink confirmed",
            SRC,
            on(SRC, instance(LARGE)),
            [("start", SHRINK_SAME), ("finish", MIG), ("confirm", MIG)],
            (2, 2048, 20),
            True,
        ),
        # live migration and evacuation end when the instance lands
        ("live dest", DST, on(DST), [("start", LIVE)], (2, 2048, 20), False),
        (
            "live dest finished",
            DST,
            on(DST),
            [("start", LIVE), ("finish", MIG)],
            (2, 2048, 20),
            True,
        ),
        (
            "live source finished",
            SRC,
            on(SRC, instance()),
            [("start", LIVE), ("finish", MIG)],
            (0, 0, 0),
            False,
        ),
        ("evacuation dest", DST, on(DST), [("start", EVAC), ("finish", MIG)], (2, 2048, 20), True),
        (
            "cold migration source",
            SRC,
            on(SRC, instance()),
            [("start", COLD), ("finish", MIG)],
            (2, 2048, 20),
            False,
        ),
        # unknown moves: a retried step is harmless
        ("confirm unknown", SRC, on(SRC, instance()), [("confirm", MIG)], (2, 2048, 20), True),
    ],
)
def test_move_accounting(name, node, start, steps, expected, instance_here):
    end = run(start, steps)
    assert as_tuple(used(end)) == expected, name
    assert (INST in end.instances) is instance_here, name


@pytest.mark.parametrize(
    "start, steps, flavor",
    [
        (on(DST), [("start", RESIZE_SRC), ("finish", MIG)], LARGE),
        (on(SRC, instance()), [("start", RESIZE_SAME), ("finish", MIG), ("confirm", MIG)], LARGE),
        (on(SRC, instance()), [("start", RESIZE_SAME), ("confirm", MIG)], LARGE),
        (on(SRC, instance()), [("start", RESIZE_SAME), ("finish", MIG), ("revert", MIG)], SMALL),
        (on(SRC, instance()), [("start", RESIZE_SRC), ("finish", MIG), ("revert", MIG)], SMALL),
    ],
)
def test_the_flavor_an_instance_ends_with(start, steps, flavor):
    assert run(start, steps).instances[INST].flavor == flavor


def test_most_recent_move_wins_and_stale_ones_are_dropped():
    first = migration("resize", SRC, DST, SMALL, LARGE, uuid="33333333-3333-3333-3333-333333333333")
    again = migration("migration", SRC, DST, SMALL, SMALL)
    state = run(on(DST), [("start", first), ("start", again)])
    assert list(state.migrations) == [MIG]
    assert as_tuple(used(state)) == (2, 2048, 20)


def test_ledger_counts_only_the_latest_of_several_records():
    older = migration("resize", SRC, DST, SMALL, LARGE, uuid="33333333-3333-3333-3333-333333333333")
    newer = migration("migration", SRC, DST).replace(seq=9)
    held = ledger.holdings(DST, {}, [older.replace(seq=3), newer])
    assert as_tuple(ledger.usage(held)) == (2, 2048, 20)


@pytest.mark.parametrize(
    "start, move",
    [
        (on(DST), migration("resize", SRC, DST, SMALL, Flavor(9, 1, 1))),  # too many vCPUs
        (
            on(SRC, instance(Flavor(6, 1024, 1))),
            migration("resize", SRC, SRC, Flavor(6, 1024, 1), Flavor(9, 1024, 1)),
        ),
        (
            on(
                DST,
                instance(LARGE, uuid="44444444-4444-4444-4444-444444444444"),
                instance(LARGE, uuid="55555555-5555-5555-5555-555555555555"),
            ),
            RESIZE_SRC,
        ),
    ],
)
def test_refused_move_claims_change_nothing(start, move):
    with pytest.raises(errors.ComputeResourcesUnavailable):
        moves.start_move(start, CTX, move)


def test_a_same_node_resize_needs_the_whole_new_flavor_beside_the_old():
    # 8 vCPUs at ratio 1, the instance holds 2: growing to 6 on the same
    # node holds 2 + 6 until confirmed, as nova and Placement count it;
    # growing to 7 does not fit, though its growth alone (5) would
    state = on(SRC, instance(Flavor(2, 1024, 1)))
    fits = migration("resize", SRC, SRC, Flavor(2, 1024, 1), Flavor(6, 1024, 1))
    assert used(moves.start_move(state, CTX, fits))[VCPU] == 8
    too_big = migration("resize", SRC, SRC, Flavor(2, 1024, 1), Flavor(7, 1024, 1))
    with pytest.raises(errors.ComputeResourcesUnavailable):
        moves.start_move(state, CTX, too_big)


@pytest.mark.parametrize(
    "start, move, match",
    [
        (on(SRC), RESIZE_SRC, "not on source"),
        (on(DST, instance()), RESIZE_SRC, "already on destination"),
        (on(SRC, instance()), migration("teleport", SRC, DST), "unknown move type"),
        (on("cccccccc-0000-0000-0000-000000000000"), RESIZE_SRC, "does not involve"),
    ],
)
def test_invalid_moves_are_refused(start, move, match):
    with pytest.raises(errors.InvalidClaimRequest, match=match):
        moves.start_move(start, CTX, move)


@pytest.mark.parametrize(
    "vm_state, counted",
    [("active", True), ("stopped", True), ("deleted", False), ("shelved_offloaded", False)],
)
def test_released_states(vm_state, counted):
    state = claims.update_instance(on(SRC, instance()), INST, vm_state=vm_state)
    assert (used(state)[VCPU] == 2) is counted


def test_deleting_an_instance_drops_its_moves():
    state = run(on(SRC, instance()), [("start", RESIZE_SRC)])
    state = claims.update_instance(state, INST, vm_state="deleted")
    assert not state.migrations and as_tuple(used(state)) == (0, 0, 0)


def test_update_of_unknown_instance():
    with pytest.raises(errors.InstanceNotFound):
        claims.update_instance(on(SRC), INST, vm_state="active")


def test_moves_that_do_not_match_the_migration_context_are_dropped():
    state = run(on(SRC, instance()), [("start", RESIZE_SAME)])
    kept, stale = moves.drop_stale(state, INST, MIG)
    assert stale == [] and MIG in kept.migrations
    dropped, stale = moves.drop_stale(state, INST, "33333333-3333-3333-3333-333333333333")
    assert stale == [MIG] and not dropped.migrations
    assert as_tuple(used(dropped)) == (2, 2048, 20)  # back to the instance's own flavor
