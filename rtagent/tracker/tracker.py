"""The tracker: the only writer of a node's accounting.

One fair (FIFO) lock from oslo.concurrency guards the in-memory state and
the durable write that acknowledges a change. Nothing under the lock talks
to the network or the hypervisor: callers read the host before calling
:meth:`Tracker.update_host` and push to Placement after it returns, from the
snapshot it hands back. A claim therefore waits at most for in-memory
accounting and one local commit, however slow Placement or libvirt are.
"""

import contextlib
import json
import logging

from oslo_concurrency import lockutils

from rtagent.tracker import errors, ledger
from rtagent.tracker.model import Claim, Instance, NodeSnapshot, check_uuid, frozen_map

LOG = logging.getLogger(__name__)


class Tracker:
    """Accounting for one node.

    :param node_uuid: the node's persistent UUID (see :mod:`.identity`).
    :param store: a :class:`rtagent.tracker.store.Store`.
    :param policy: a :class:`rtagent.tracker.ledger.ResourcePolicy`.
    """

    def __init__(self, node_uuid, store, policy):
        self.node_uuid = node_uuid
        self._store = store
        self._policy = policy
        # A private FairLocks registry: trackers in one process (tests, and
        # later several nodes per agent) never share a lock by name.
        self._lock = lockutils.FairLocks().get(f"tracker-{node_uuid}")
        self._host = None
        # Remembered across restarts: an agent restarted while Placement is
        # down must not fall back to the initial ratios and oversubscribe.
        self._ratios_key = f"placement_ratios:{node_uuid}"
        self._placement_ratios = json.loads(store.get_meta(self._ratios_key) or "{}")
        self._inventories = {}
        self._instances = {i.uuid: i for i in store.load_instances(node_uuid)}
        LOG.info("Tracker for node %s restored %d instance(s)", node_uuid, len(self._instances))

    @contextlib.contextmanager
    def _locked(self):
        with self._lock.write_lock():
            yield

    def lock_held_by_current_thread(self):
        """True while the calling thread holds the tracker lock (for checks)."""
        return self._lock.is_writer()

    @property
    def policy(self):
        return self._policy

    def update_host(self, host):
        """Record a fresh host reading and return the resulting snapshot."""
        with self._locked():
            self._host = host
            self._recompute_inventories()
            return self._snapshot()

    def set_placement_ratios(self, ratios):
        """Record the allocation ratios Placement holds for this node.

        Used for classes whose ratio is not configured: an operator may set
        it through the Placement API, and claims must use what Placement
        uses. Configured ratios still win. Durable when it returns.

        :raises StateError: the durable write failed; nothing changed.
        """
        ratios = dict(ratios)
        with self._locked():
            if ratios != self._placement_ratios:
                self._store.set_meta(self._ratios_key, json.dumps(ratios, sort_keys=True))
                self._placement_ratios = ratios
                self._recompute_inventories()

    def set_policy(self, policy):
        """Apply new reserved amounts / ratios (config reload)."""
        with self._locked():
            self._policy = policy
            self._recompute_inventories()

    def _recompute_inventories(self):
        if self._host is not None:
            self._inventories = ledger.inventories(self._host, self._policy, self._placement_ratios)

    def instance_claim(self, instance_uuid, flavor, limits=None, volume_backed=False):
        """Claim ``flavor``'s resources for an instance; durable on return.

        Claiming again for the same instance and the same resources returns
        the existing claim, so a caller may safely retry.

        :raises InvalidClaimRequest: malformed UUID or limits.
        :raises NodeNotReady: no host audit has completed yet.
        :raises ComputeResourcesUnavailable: it does not fit; nothing changed.
        :raises InstanceClaimConflict: the instance holds a different claim.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance_uuid = check_uuid(instance_uuid)
        checked_limits = ledger.check_limits(limits)
        requested = ledger.requested_resources(flavor, volume_backed)
        instance = Instance(instance_uuid, flavor, frozen_map(requested), volume_backed)
        with self._locked():
            if self._host is None:
                raise errors.NodeNotReady(node=self.node_uuid)
            existing = self._instances.get(instance_uuid)
            if existing is not None:
                if dict(existing.resources) == requested:
                    return self._claim_of(existing)
                raise errors.InstanceClaimConflict(
                    instance_uuid=instance_uuid,
                    existing=dict(existing.resources),
                    requested=requested,
                )
            used = ledger.usage(self._instances.values())
            reasons = ledger.refusals(self._inventories, used, requested, checked_limits)
            if reasons:
                raise errors.ComputeResourcesUnavailable(instance_uuid, reasons)
            # Durable first: if the commit fails, memory is untouched.
            self._store.put_instance(self.node_uuid, instance)
            self._instances[instance_uuid] = instance
        LOG.info("Claimed %s for instance %s", requested, instance_uuid)
        return self._claim_of(instance)

    def abort_instance_claim(self, instance_uuid):
        """Release an instance's claim. Returns False if there was none.

        :raises InvalidClaimRequest: malformed UUID.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance_uuid = check_uuid(instance_uuid)
        with self._locked():
            if instance_uuid not in self._instances:
                return False
            self._store.delete_instance(instance_uuid)
            del self._instances[instance_uuid]
        LOG.info("Released the claim of instance %s", instance_uuid)
        return True

    def snapshot(self):
        """A consistent, immutable copy of the node's state."""
        with self._locked():
            return self._snapshot()

    def _snapshot(self):
        instances = tuple(self._instances[u] for u in sorted(self._instances))
        return NodeSnapshot(
            node_uuid=self.node_uuid,
            host=self._host,
            inventories=frozen_map(self._inventories),
            usage=frozen_map(ledger.usage(instances)),
            instances=instances,
            policy=self._policy,
        )

    def _claim_of(self, instance):
        return Claim(instance.uuid, self.node_uuid, instance.resources)
