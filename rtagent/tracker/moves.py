"""Moves (resize, cold migration, live migration, evacuation) as pure state
transitions, with nova's accounting on both nodes.

The life of a move, seen from each node it involves::

    start   dest: claims the new flavor (fit-checked)
            source: records the outgoing move (the instance keeps its usage)
            same node (resize): claims the new flavor beside the old one
    finish  dest: the instance now lives here, with the new flavor
            source: the instance has left; the old flavor stays held
            live migration / evacuation: the move is over at once
    confirm source frees the old flavor; dest keeps the instance
    revert  dest frees the new flavor; source takes the instance back

NUMA cells and PCI devices go with the flavor: the destination places and
chooses them at start, the source keeps the instance's (``old_numa``,
``old_pci``), and confirm or revert frees the side given up.

Confirm, revert and finish of a move this node does not know return the
state unchanged, so a retried call is harmless.
"""

from rtagent.pci import held as pci_held
from rtagent.resources import PCPU, VCPU, frozen_map
from rtagent.tracker import errors, ledger, requests
from rtagent.tracker.fits import ensure_fits, ensure_numa_fits
from rtagent.tracker.model import MOVE_TYPES, SELF_CONFIRMING_MOVES, Instance
from rtagent.tracker.pciholds import DeviceChoice, cell_rank


def start_move(
    state, ctx, migration, limits=None, assigned_request=None, *, guest=None, pci_requests=()
):
    """``state`` with ``migration`` recorded (and claimed where needed).

    What the node will hold is fit-checked exactly: where the instance lives
    here (the source, or a same-node resize) its old flavor is the tracked
    one, and a request that says otherwise is refused, so an inflated
    ``old_flavor`` can never make the node hold more than was checked.

    A newer move of the same instance supersedes older ones on this node:
    they no longer match the instance's move and are dropped (nova marks
    them as error). An incoming move makes the instance active here again:
    it is no longer released, so healing leaves its allocations alone.

    :param guest: the NUMA topology the new flavor asks for, or None: at
        the destination its cells are placed (the move's ``new_numa``); the
        source keeps the instance's own as ``old_numa``.
    :param pci_requests: the PCI requests the instance makes at the
        destination (:class:`~rtagent.pci.pools.PciRequest`): there, devices
        are chosen for them (the move's ``new_pci``, on the cells of
        ``new_numa``); the source keeps the instance's devices as
        ``old_pci``. A same-node resize holds both until confirmed or
        reverted.
    :raises InvalidClaimRequest: unknown type, the move does not involve
        this node, the instance is not where the move says, or the old
        flavor is not the one tracked.
    :raises MoveConflict: the migration UUID is recorded with other details.
    :raises ClaimPending: a standalone claim of the instance is in flight.
    :raises ComputeResourcesUnavailable: the destination cannot fit it.
    :raises DevicesUnavailable: the destination cannot meet the PCI requests.
    """
    node = state.node_uuid
    if migration.migration_type not in MOVE_TYPES:
        raise errors.InvalidClaimRequest(reason=f"unknown move type {migration.migration_type!r}")
    if node not in (migration.source_node, migration.dest_node):
        raise errors.InvalidClaimRequest(
            reason=f"move {migration.uuid} does not involve node {node}"
        )
    state.check_not_pending(migration.instance_uuid)
    if migration.dest_node == node and ledger.pins_on_shared(state.host, state.policy):
        # nova's upgrade fallback: the pinned vCPUs are allocated as VCPU.
        counted = requests.on_shared_cpus(migration.new_resources, guest)
        migration = migration.replace(new_resources=frozen_map(counted))
    existing = state.migrations.get(migration.uuid)
    if existing is not None:
        _check_same_move(existing, migration, pci_requests if migration.dest_node == node else None)
        return state  # a retry of the same start
    here = state.instances.get(migration.instance_uuid)
    stale = [m.uuid for m in state.migrations_of(migration.instance_uuid)]
    state = state.without_migrations(stale)
    if migration.same_node or migration.source_node == node:
        if here is None:
            raise errors.InvalidClaimRequest(
                reason=f"instance {migration.instance_uuid} is not on source node {node}"
            )
        # Compared by flavor sizes: the request does not carry the old
        # flavor's extra specs, so it cannot tell which vCPUs are PCPU.
        tracked = ledger.requested_resources(here.flavor, here.volume_backed)
        if dict(migration.old_resources) != tracked:
            raise errors.InvalidClaimRequest(
                reason=f"old_flavor of move {migration.uuid} asks for "
                f"{dict(migration.old_resources)} but instance {here.uuid} holds "
                f"{tracked} on node {node}"
            )
        migration = migration.replace(
            old_flavor=here.flavor,
            old_resources=here.resources,
            old_assigned=here.assigned,
            old_numa=here.numa,
            old_pci=here.pci_devices,
            project_id=here.project_id,
            os_type=here.os_type,
        )
    if migration.dest_node == node:
        if here is not None and not migration.same_node:
            raise errors.InvalidClaimRequest(
                reason=f"instance {migration.instance_uuid} is already on destination node {node}"
            )
        # A same-node resize holds the old flavor and the new one until it
        # is confirmed or reverted (ledger.holdings), so the new flavor must
        # fit in full beside the old, wherever it lands.
        requested = dict(migration.new_resources)
        chosen = ensure_fits(
            state,
            ctx,
            requested,
            limits=limits,
            instance_uuid=migration.instance_uuid,
            assigned_request=assigned_request,
        )
        devices = DeviceChoice(state, pci_requests)
        new_numa = ensure_numa_fits(
            state,
            ctx,
            guest,
            instance_uuid=migration.instance_uuid,
            accept=devices.allows if pci_requests else None,
            cell_rank=cell_rank(state, pci_requests),
        )
        new_pci = devices.take(new_numa)
        migration = migration.replace(
            new_assigned=frozen_map(chosen), new_numa=new_numa, new_pci=new_pci
        )
        state = state.forget_released([migration.instance_uuid])
    return state.with_migration(migration)


def _check_same_move(existing, requested, pci_requests=None):
    """A repeated start must describe the recorded move exactly (and, at
    the destination, ask for the same PCI requests: ids and counts).

    :raises MoveConflict: it does not.
    """
    pci = []
    if pci_requests is not None:
        held, asked = pci_held.counts(existing.new_pci), pci_held.requested_counts(pci_requests)
        pci.append(("pci_requests", held, asked))
    differences = [
        name
        for name, a, b in (
            ("instance_uuid", existing.instance_uuid, requested.instance_uuid),
            ("migration_type", existing.migration_type, requested.migration_type),
            ("source_node", existing.source_node, requested.source_node),
            ("dest_node", existing.dest_node, requested.dest_node),
            ("old_flavor", _as_requested(existing), dict(requested.old_resources)),
            ("new_flavor", existing.new_flavor, requested.new_flavor),
            ("new_flavor", dict(existing.new_resources), dict(requested.new_resources)),
            *pci,
        )
        if a != b
    ]
    if differences:
        raise errors.MoveConflict(
            migration_uuid=existing.uuid,
            reason="different " + ", ".join(sorted(set(differences))),
        )


def _as_requested(move):
    """The recorded move's old resources as a request states them: a
    request says nothing of the old flavor's extra specs, so it counts
    every vCPU as VCPU, while the source recorded what the instance holds
    (pinned vCPUs, and an isolated emulator thread's CPU, as PCPU)."""
    held = dict(move.old_resources)
    pcpus = held.pop(PCPU, 0)
    if pcpus:
        emulator = 1 if move.old_numa is not None and move.old_numa.emulator_isolate else 0
        held[VCPU] = held.get(VCPU, 0) + pcpus - emulator
    return held


def finish_move(state, migration_uuid):
    """The instance has landed at the destination."""
    move = state.migrations.get(migration_uuid)
    if move is None or move.status == "finished":
        return state  # unknown, or a retried finish
    node = state.node_uuid
    here = state.instances.get(move.instance_uuid)
    if move.same_node:
        state = state.with_instance(
            here.replace(
                flavor=move.new_flavor,
                resources=move.new_resources,
                assigned=move.new_assigned,
                numa=move.new_numa,
                pci_devices=move.new_pci,
            )
        )
    elif move.dest_node == node:
        state = state.with_instance(_landed(move, "new", finished=True))
    else:
        state = state.without_instance(move.instance_uuid)
    if move.migration_type in SELF_CONFIRMING_MOVES:
        return state.without_migrations([migration_uuid])
    return state.with_migration(move.replace(status="finished"))


def confirm_move(state, migration_uuid):
    """The move is kept: the source frees the old flavor."""
    move = state.migrations.get(migration_uuid)
    if move is None:
        return state
    if move.same_node and move.status != "finished":
        # Confirming before finishing: the new flavor becomes the instance's.
        state = finish_move(state, migration_uuid)
    return state.without_migrations([migration_uuid])


def revert_move(state, migration_uuid):
    """The move is undone: the destination frees the new flavor and the
    source holds the instance with its old flavor again."""
    move = state.migrations.get(migration_uuid)
    if move is None:
        return state
    node = state.node_uuid
    here = state.instances.get(move.instance_uuid)
    if move.same_node:
        if here is not None:
            state = state.with_instance(
                here.replace(
                    flavor=move.old_flavor,
                    resources=move.old_resources,
                    assigned=move.old_assigned,
                    numa=move.old_numa,
                    pci_devices=move.old_pci,
                )
            )
    elif move.dest_node == node:
        state = state.without_instance(move.instance_uuid)
    elif here is None:
        state = state.with_instance(_landed(move, "old"))
    return state.without_migrations([migration_uuid])


def _landed(move, side, finished=False):
    """The instance of ``move`` as it lives on this node after it landed,
    with the ``side`` ("old" or "new") of the move it holds; ``finished``:
    it landed at the destination. Its states are nova's then: ``resized``
    while a resize or cold migration waits for its confirmation, else the
    vm_state it had when the move started (nova's periodic reconciliation
    corrects any other change with ``update_instance``)."""
    waits = finished and move.migration_type not in SELF_CONFIRMING_MOVES
    return Instance(
        uuid=move.instance_uuid,
        flavor=getattr(move, f"{side}_flavor"),
        resources=getattr(move, f"{side}_resources"),
        vm_state="resized" if waits else move.vm_state,
        project_id=move.project_id,
        os_type=move.os_type,
        assigned=getattr(move, f"{side}_assigned"),
        numa=getattr(move, f"{side}_numa"),
        pci_devices=getattr(move, f"{side}_pci"),
    )


def drop_stale(state, instance_uuid, current_migration):
    """Drop this node's moves of ``instance_uuid`` other than
    ``current_migration`` (the instance's migration context, or None when
    it has none): nova marks such stale migrations as error.

    :returns: (new state, sorted UUIDs of the moves dropped).
    """
    stale = sorted(
        m.uuid for m in state.migrations_of(instance_uuid) if m.uuid != current_migration
    )
    return state.without_migrations(stale), stale
