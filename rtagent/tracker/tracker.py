"""The tracker: the only writer of a node's accounting.

One fair (FIFO) lock from oslo.concurrency guards the in-memory state and
the durable write that acknowledges a change. Nothing under the lock talks
to the network or the hypervisor: callers read the host before calling
:meth:`Tracker.update_host` and push to Placement after it returns, from the
snapshot it hands back. A claim therefore waits at most for in-memory
accounting and one local commit, however slow Placement or libvirt are.

Every operation computes a new :class:`~rtagent.tracker.state.NodeState`
purely (:mod:`.claims`, :mod:`.moves`), writes the difference in one store
transaction, and only then adopts it.
"""

import collections
import contextlib
import json
import logging
import time

from oslo_concurrency import lockutils

from rtagent.resources import frozen_map
from rtagent.tracker import (
    assigned,
    claims,
    drift,
    errors,
    ledger,
    moves,
    requests,
    stats,
    view,
)
from rtagent.tracker.model import Claim, NodeSnapshot, check_uuid
from rtagent.tracker.state import FitContext, NodeState, changes

LOG = logging.getLogger(__name__)

# How many recent operations the tracker remembers (for status and tests).
RECENT_OPERATIONS = 256


class Tracker:
    """Accounting for one node.

    :param node_uuid: the node's persistent UUID (see :mod:`.identity`).
    :param store: a :class:`rtagent.tracker.store.Store`.
    :param policy: a :class:`rtagent.tracker.ledger.ResourcePolicy`.
    :param count_untracked: count running domains that no claim accounts
        for as used (nova counts such "orphans" too).
    :param missing_grace: seconds a tracked instance may lack a domain
        before it is reported as missing.
    :param clock: monotonic clock (seconds); injected by tests.
    """

    def __init__(
        self,
        node_uuid,
        store,
        policy,
        *,
        count_untracked=True,
        missing_grace=600.0,
        clock=time.monotonic,
    ):
        self.node_uuid = node_uuid
        self._store = store
        self._policy = policy
        self._count_untracked = count_untracked
        self._missing_grace = missing_grace
        self._clock = clock
        # A private FairLocks registry: trackers in one process (tests, and
        # later several nodes per agent) never share a lock by name.
        self._lock = lockutils.FairLocks().get(f"tracker-{node_uuid}")
        self._host = None
        self._unavailable = None
        self._drift = drift.Drift()
        self._offered = {}
        self._failed_builds = 0
        self._recent = collections.deque(maxlen=RECENT_OPERATIONS)
        self._op_seq = 0
        # Remembered across restarts: an agent restarted while Placement is
        # down must not fall back to the initial ratios and oversubscribe.
        self._ratios_key = f"placement_ratios:{node_uuid}"
        self._placement_ratios = json.loads(store.get_meta(self._ratios_key) or "{}")
        self._inventories = {}
        self._state = NodeState.restore(store, node_uuid)
        self._disabled_key = f"disabled:{node_uuid}"
        self._disabled = store.get_meta(self._disabled_key)
        LOG.info(
            "Tracker for node %s restored %d instance(s) and %d move(s)",
            node_uuid,
            len(self._state.instances),
            len(self._state.migrations),
        )

    # -- locking ---------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, operation, key=None):
        with self._lock.write_lock():
            self._op_seq += 1
            self._recent.append((self._op_seq, operation, key))
            yield

    def lock_held_by_current_thread(self):
        """True while the calling thread holds the tracker lock (for checks)."""
        return self._lock.is_writer()

    def recent_operations(self):
        """(sequence, operation, key) of the last operations, in the order the
        lock served them."""
        with self._lock.write_lock():
            return list(self._recent)

    def _commit(self, new_state):
        """Persist what changed, then adopt ``new_state``. Lock held."""
        delta = changes(self._state, new_state)
        if delta:
            self._store.apply(self.node_uuid, delta)
        self._state = new_state

    # -- host, policy, ratios ----------------------------------------------

    @property
    def policy(self):
        return self._policy

    def update_host(self, host):
        """Record a fresh host reading and return the resulting snapshot."""
        with self._locked("update_host"):
            first = self._host is None
            self._host = host
            self._unavailable = None
            self._drift = drift.compare(
                host.domains,
                self._state.instances,
                {m.instance_uuid for m in self._state.migrations.values()},
                previous=self._drift,
                now=self._clock(),
                grace=self._missing_grace,
            )
            self._recompute_inventories()
            snap = self._snapshot()
        if first:
            for message in drift.restart_report(snap, self._count_untracked):
                LOG.warning("Node %s: %s", snap.node_uuid, message)
        return snap

    def mark_host_unavailable(self, reason):
        """The hypervisor cannot be read: refuse claims until it can."""
        with self._locked("host_unavailable"):
            self._unavailable = str(reason)

    def set_placement_ratios(self, ratios):
        """Record the allocation ratios Placement holds for this node.

        Used for classes whose ratio is not configured: an operator may set
        it through the Placement API, and claims must use what Placement
        uses. Configured ratios still win. Durable when it returns.

        :raises StateError: the durable write failed; nothing changed.
        """
        ratios = dict(ratios)
        with self._locked("set_placement_ratios"):
            if ratios != self._placement_ratios:
                self._store.set_meta(self._ratios_key, json.dumps(ratios, sort_keys=True))
                self._placement_ratios = ratios
                self._recompute_inventories()

    def set_policy(self, policy):
        """Apply new reserved amounts / ratios (config reload)."""
        with self._locked("set_policy"):
            self._policy = policy
            self._recompute_inventories()

    def set_offered_resources(self, offered):
        """Resource class -> identifiers the node offers (assigned resources)."""
        with self._locked("set_offered_resources"):
            self._offered = {rc: tuple(sorted(ids)) for rc, ids in offered.items()}

    def _recompute_inventories(self):
        if self._host is not None:
            self._inventories = ledger.inventories(self._host, self._policy, self._placement_ratios)

    def _context(self):
        """What claims are checked against now. Lock held.

        :raises NodeNotReady, HostUnavailable: claims cannot be checked.
        """
        if self._host is None:
            raise errors.NodeNotReady(node=self.node_uuid)
        if self._unavailable is not None:
            raise errors.HostUnavailable(node=self.node_uuid, reason=self._unavailable)
        extra = tuple(self._drift.untracked_usage()) if self._count_untracked else ()
        return FitContext(
            inventories=frozen_map(self._inventories),
            extra_usage=extra,
            offered=frozen_map(self._offered),
        )

    # -- instance claims -------------------------------------------------

    def instance_claim(
        self,
        instance_uuid,
        flavor,
        limits=None,
        *,
        volume_backed=False,
        project_id="",
        assigned=None,
    ):
        """Claim ``flavor``'s resources for an instance; durable on return.

        Claiming again for the same instance and the same resources returns
        the existing claim, so a caller may safely retry.

        :param limits: nova's scheduler limits dict, or None.
        :param assigned: {resource class: count} of units claimed by
            identifier (see :mod:`.assigned`).
        :raises InvalidClaimRequest: malformed UUID, flavor or limits.
        :raises NodeNotReady, HostUnavailable: claims cannot be checked now.
        :raises ComputeResourcesUnavailable: it does not fit; nothing changed.
        :raises InstanceClaimConflict: the instance holds a different claim.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance = requests.instance(
            instance_uuid, flavor, volume_backed=volume_backed, project_id=project_id
        )
        checked_limits = ledger.check_limits(limits)
        with self._locked("instance_claim", instance.uuid):
            new = claims.claim_instance(
                self._state, self._context(), instance, checked_limits, assigned
            )
            created = new is not self._state
            self._commit(new)
            held = self._state.instances[instance.uuid]
        if created:
            LOG.info("Claimed %s for instance %s", dict(held.resources), held.uuid)
        return Claim(held.uuid, self.node_uuid, held.resources, created)

    def abort_instance_claim(self, instance_uuid):
        """Release an instance's claim. Returns False if there was none.

        :raises InvalidClaimRequest: malformed UUID.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance_uuid = check_uuid(instance_uuid)
        with self._locked("abort_instance_claim", instance_uuid):
            if instance_uuid not in self._state.instances:
                return False
            self._commit(claims.remove_instance(self._state, instance_uuid))
        LOG.info("Released the claim of instance %s", instance_uuid)
        return True

    def update_instance(self, instance_uuid, *, vm_state=None, task_state=None, set_task=False):
        """Record a nova state change. ``deleted`` and ``shelved_offloaded``
        release the instance's usage on this node.

        :raises InstanceNotFound: not tracked on this node.
        """
        instance_uuid = check_uuid(instance_uuid)
        with self._locked("update_instance", instance_uuid):
            self._commit(
                claims.update_instance(self._state, instance_uuid, vm_state, task_state, set_task)
            )

    def build_failed(self):
        """A build on this node failed (nova's failed_builds stat)."""
        with self._locked("build_failed"):
            self._failed_builds += 1

    def build_succeeded(self):
        with self._locked("build_succeeded"):
            self._failed_builds = 0

    # -- moves -----------------------------------------------------------

    def start_move(self, *args, limits=None, assigned=None, **request):
        """Record a move involving this node; at the destination, claim it.

        The move is described as :func:`rtagent.tracker.requests.migration`
        takes it (``new_flavor`` defaults to ``old_flavor``). Repeating a
        start is harmless.

        :raises InvalidClaimRequest: malformed input, or the move does not
            involve this node.
        :raises ComputeResourcesUnavailable: the destination cannot fit it.
        :raises StateError: the durable write failed; nothing changed.
        """
        migration = requests.migration(*args, **request)
        checked_limits = ledger.check_limits(limits)
        with self._locked("start_move", migration.uuid):
            ctx = self._context() if migration.dest_node == self.node_uuid else None
            new = moves.start_move(self._state, ctx, migration, checked_limits, assigned)
            self._commit(new)
        LOG.info("Move recorded: %s", migration.describe())
        return True

    def set_migration_context(self, instance_uuid, migration_uuid=None):
        """The instance's current move is ``migration_uuid`` (None: none).

        Moves of the instance recorded here that do not match are stale:
        they are dropped and logged as errors. :returns: their UUIDs.
        """
        instance_uuid = check_uuid(instance_uuid)
        if migration_uuid is not None:
            migration_uuid = check_uuid(migration_uuid, "migration_uuid")
        with self._locked("set_migration_context", instance_uuid):
            new, stale = moves.drop_stale(self._state, instance_uuid, migration_uuid)
            self._commit(new)
        for uuid in stale:
            LOG.error(
                "Move %s of instance %s is stale (context %s): dropped",
                uuid,
                instance_uuid,
                migration_uuid,
            )
        return stale

    def finish_move(self, migration_uuid):
        """The instance has landed at the destination."""
        return self._move_step("finish_move", moves.finish_move, migration_uuid)

    def confirm_move(self, migration_uuid):
        """Keep the move: the source frees the old flavor."""
        return self._move_step("confirm_move", moves.confirm_move, migration_uuid)

    def revert_move(self, migration_uuid):
        """Undo the move: the destination frees the new flavor."""
        return self._move_step("revert_move", moves.revert_move, migration_uuid)

    def _move_step(self, name, step, migration_uuid):
        """Apply a move transition; False if this node has no such move."""
        migration_uuid = check_uuid(migration_uuid, "migration_uuid")
        with self._locked(name, migration_uuid):
            if migration_uuid not in self._state.migrations:
                return False
            self._commit(step(self._state, migration_uuid))
        LOG.info("%s %s on node %s", name, migration_uuid, self.node_uuid)
        return True

    # -- node status and healing -------------------------------------------

    def set_disabled(self, reason):
        """Disable the node (``reason`` a string) or enable it (None).

        Persisted: a restart keeps the node as it was. Placement shows it as
        the COMPUTE_STATUS_DISABLED trait, which nova's scheduler filters on.
        """
        with self._locked("set_disabled"):
            if reason is None:
                if self._disabled is not None:
                    self._store.delete_meta(self._disabled_key)
            else:
                self._store.set_meta(self._disabled_key, str(reason) or "disabled")
            self._disabled = None if reason is None else (str(reason) or "disabled")

    def forget_released(self, instance_uuids):
        """Healing is done for these released consumers: stop tracking them."""
        with self._locked("forget_released"):
            self._commit(self._state.forget_released(instance_uuids))

    # -- readers -----------------------------------------------------------

    def snapshot(self):
        """A consistent, immutable copy of the node's state."""
        with self._lock.write_lock():
            return self._snapshot()

    def compute_node_view(self, host_ip):
        """The compute-node dict a Nova scheduler reads (see :mod:`.view`)."""
        return view.compute_node(self.snapshot(), host_ip)

    def _snapshot(self):
        state = self._state
        instances = tuple(state.instances[u] for u in sorted(state.instances))
        held = state.held()
        extra = self._drift.untracked_usage() if self._count_untracked else ()
        return NodeSnapshot(
            node_uuid=self.node_uuid,
            host=self._host,
            inventories=frozen_map(self._inventories),
            usage=frozen_map(ledger.usage(held, extra)),
            instances=instances,
            policy=self._policy,
            migrations=tuple(state.migrations[u] for u in sorted(state.migrations)),
            stats=frozen_map(stats.stats(instances, self._failed_builds)),
            drift=self._drift,
            assigned_missing=frozen_map(assigned.missing(self._offered, held))
            if self._offered
            else frozen_map({}),
            unavailable=self._unavailable,
            untracked_usage=frozen_map(ledger.usage([], extra)),
            released=state.released,
            disabled=self._disabled,
        )
