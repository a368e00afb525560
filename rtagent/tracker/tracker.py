"""The tracker: the only writer of a node's accounting.

One fair (FIFO) lock from oslo.concurrency serialises the writers: it guards
computing the next state and the durable write that acknowledges it.
Nothing under the lock talks to the network or the hypervisor: callers read
the host before calling :meth:`Tracker.update_host` and push to Placement
after it returns. A claim therefore waits at most for in-memory accounting
and one local commit, however slow Placement or libvirt are.

Every operation computes a new :class:`~rtagent.tracker.state.NodeState`
purely (:mod:`.claims`, :mod:`.moves`), writes the difference in one store
transaction, and only then adopts it by swapping one reference. Readers
(status, metrics, health, healing) take that reference without the lock:
the value is immutable, so a reader never waits behind a writer and never
sees half an operation. The :class:`NodeSnapshot` handed out is built from
it once per state, on first read.
"""

import collections
import contextlib
import itertools
import logging
import secrets
import time

from oslo_concurrency import lockutils

from rtagent.pci import address as pci_address
from rtagent.pci import devices as pcidevs
from rtagent.pci import errors as pcierrors
from rtagent.pci import requests as pcirequests
from rtagent.resources import frozen_map
from rtagent.tracker import claims, drift, errors, ledger, moves, requests, view
from rtagent.tracker.fits import fit_context
from rtagent.tracker.model import Claim, check_uuid
from rtagent.tracker.state import NodeState, snapshot_of, view_inputs
from rtagent.tracker.writes import changes

LOG = logging.getLogger(__name__)

# How many recent operations the tracker remembers (for status and tests).
RECENT_OPERATIONS = 256


class Tracker:
    """Accounting for one node.

    :param node_uuid: the node's persistent UUID (see :mod:`.identity`).
    :param store: a :class:`rtagent.tracker.store.Store`.
    :param policy: a :class:`rtagent.tracker.ledger.ResourcePolicy`.
    :param pci: the parsed ``[pci]`` options (a
        :class:`rtagent.conf.pci.PciConfig`), or None: no PCI device tracked.
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
        pci=None,
        count_untracked=True,
        missing_grace=600.0,
        clock=time.monotonic,
    ):
        self.node_uuid = node_uuid
        self._store = store
        self._count_untracked = count_untracked
        self._missing_grace = missing_grace
        self._clock = clock
        # A private FairLocks registry: trackers in one process (tests, and
        # several nodes per agent) never share a lock by name.
        self._lock = lockutils.FairLocks().get(f"tracker-{node_uuid}")
        self._recent = collections.deque(maxlen=RECENT_OPERATIONS)
        self._op_seq = 0
        self._tokens = itertools.count(1)
        # The adopted state: replaced (never mutated) by writers under the
        # lock, read by reference by anyone.
        self._state = NodeState.restore(store, node_uuid, policy, pci)
        # (state, serial): the adopted state with the count of commits
        # before it, swapped whole with it, so that a compute-node view
        # says which state it shows (its ``revision``). The incarnation
        # tells this tracker's serials from those of the agent before a
        # restart, which count from 0 again.
        self._incarnation = secrets.token_hex(16)
        self._stamped = (self._state, 0)
        # (state, snapshot) of the last snapshot built; readers rebuild it
        # only when the state moved. Two readers racing build it twice, and
        # the tuple is swapped whole, so neither sees a torn pair.
        self._published = (None, None)
        # (domains, instances, migrations) the current drift was computed from.
        self._drift_inputs = None
        # The last reading's host metrics (HostMetric values): not part of
        # the state, since they change on every reading while the node's
        # accounting does not. Replaced whole, read by reference.
        self._host_metrics = ()
        self._lost_cpus = {}  # the NUMA claims' lost CPUs last warned about
        self._unclaimed_cpus = {}  # domains' unclaimed pinned CPUs, ditto
        # The PCI devices tracked and held without a claim, last logged
        # (None before the first audit).
        self._pci_logged = None
        LOG.info(
            "Tracker for node %s restored %d instance(s) and %d move(s)",
            node_uuid,
            len(self._state.instances),
            len(self._state.migrations),
        )

    # -- locking and commits -----------------------------------------------

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
        """Persist what changed, then adopt ``new_state``. Lock held.

        :raises StateError: the write failed; the old state stays.
        """
        if new_state is self._state:
            return  # nothing changed (a steady audit): nothing to compare or write
        delta = changes(self._state, new_state)
        if delta:
            self._store.apply(self.node_uuid, delta)
        self._state = new_state
        self._stamped = (new_state, self._stamped[1] + 1)

    def _update(self, operation, key, transition):
        """Apply ``transition(state) -> state`` under the lock and commit it.

        :returns: the adopted state.
        """
        with self._locked(operation, key):
            self._commit(transition(self._state))
            return self._state

    # -- host, policy, ratios ----------------------------------------------

    @property
    def policy(self):
        return self._state.policy

    def update_host(self, host):
        """Record a fresh host reading and return the resulting snapshot."""
        first = self._state.host is None
        self._record_reading(host)
        snap = self.snapshot()
        if first:
            for message in drift.restart_report(snap, self._count_untracked):
                LOG.warning("Node %s: %s", snap.node_uuid, message)
        self._report_lost_cpus(snap)
        self._report_unclaimed_cpus(snap)
        self._report_pci(snap)
        return snap

    def take_reading(self, host):
        """Record a host reading taken between audits (nova's build thread
        reads the node after its claim) without building a snapshot: a
        claim has just changed the state, and a new snapshot sorts and sums
        every instance. The warnings :meth:`update_host` derives from the
        snapshot wait for the next audit.

        :returns: whether the reading changed the node's state.
        """
        before = self._state
        self._record_reading(host)
        return self._state is not before

    @property
    def hypervisor_hostname(self):
        """The node's name in its last reading (None before the first)."""
        host = self._state.host
        return host.hypervisor_hostname if host is not None else None

    def _record_reading(self, host):
        def read(state):
            inputs = (host.domains, state.instances, state.migrations)
            # The same domain tuple (the driver reuses it while nothing
            # changed) and the same claims give the same drift, unless an
            # instance is missing but still within its grace period.
            if (
                self._drift_inputs is not None
                and all(a is b for a, b in zip(inputs, self._drift_inputs, strict=True))
                and len(state.drift.missing) == len(state.drift.missing_since)
            ):
                found = state.drift
            else:
                moving = {m.instance_uuid for m in state.migrations.values()}
                found = drift.compare(
                    host.domains,
                    state.instances,
                    moving,
                    previous=state.drift,
                    now=self._clock(),
                    grace=self._missing_grace,
                )
            self._drift_inputs = inputs
            if found == state.drift and host == state.host and state.unavailable is None:
                # A steady audit keeps the state, and so the published
                # snapshot: rebuilding it sorts and sums every instance.
                return state
            return state.with_inputs(host=host, unavailable=None, drift=found)

        # Set first: a reading of now, whether or not the store takes the
        # state below.
        self._host_metrics = tuple(getattr(host, "metrics", ()))
        self._update("update_host", None, read)

    def _report_lost_cpus(self, snap):
        """Warn when the claims keeping CPUs that are no longer dedicated
        CPUs of their cell change (once per change, not per audit)."""
        lost = dict(snap.numa_lost)
        if lost == self._lost_cpus:
            return
        self._lost_cpus = lost
        for consumer, cpus in sorted(lost.items()):
            LOG.warning(
                "Node %s: %s keeps pinned CPU(s) %s, which are no longer dedicated CPUs of "
                "their NUMA cell (cpu_dedicated_set changed, or the host's CPUs did); the "
                "guest still runs there and they stay counted until it is moved or deleted",
                snap.node_uuid,
                consumer,
                ",".join(str(c) for c in cpus),
            )

    def _report_unclaimed_cpus(self, snap):
        """Warn when the dedicated CPUs domains are pinned to without a
        claim keeping them change (once per change, not per audit)."""
        unclaimed = dict(snap.numa_unclaimed)
        if unclaimed == self._unclaimed_cpus:
            return
        old, self._unclaimed_cpus = self._unclaimed_cpus, unclaimed
        for domain, cpus in sorted(unclaimed.items()):
            if old.get(domain) != cpus:
                LOG.warning(
                    "Node %s: domain %s is pinned to dedicated CPU(s) %s that no claim of "
                    "its own keeps (a guest pinned before its claim, or one without a "
                    "claim); no other claim gets them while it stays pinned there",
                    snap.node_uuid,
                    domain,
                    ",".join(str(c) for c in cpus),
                )

    def _report_pci(self, snap):
        """Log the tracked PCI devices, and those a domain holds without a
        claim, when they change (not per audit)."""
        tracked = tuple(d.address for d in snap.pci_devices if not d.gone)
        held = snap.pci_held
        gone = tuple((d.address, d.instance_uuid) for d in pcidevs.held_but_gone(snap.pci_devices))
        if (tracked, held, gone) == self._pci_logged:
            return
        specs = getattr(self._state.pci, "device_specs", ())
        # Said once at start-up when there are specs, then on every change.
        old_tracked, old_held, old_gone = self._pci_logged or (None if specs else (), (), ())
        self._pci_logged = (tracked, held, gone)
        for address, owner in sorted(set(gone) - set(old_gone)):
            LOG.warning(
                "Node %s: PCI device %s, held by instance %s, is no longer reported by the "
                "host or matched by [pci] device_spec; it stays held until the instance is "
                "deleted or moved away",
                snap.node_uuid,
                address,
                owner,
            )
        if tracked != old_tracked:
            LOG.info(
                "Node %s: %d of the host's %d PCI device(s) match [pci] device_spec",
                snap.node_uuid,
                len(tracked),
                len(snap.host.pci_devices),
            )
        for h in sorted(set(held) - set(old_held), key=lambda h: (h.address, h.owner)):
            LOG.warning(
                "Node %s: PCI device %s is held by domain %s (%s) without a claim; it is "
                "not offered to guests while the domain has it",
                snap.node_uuid,
                h.address,
                h.domain_name,
                h.owner,
            )
        for h in sorted(set(old_held) - set(held), key=lambda h: (h.address, h.owner)):
            LOG.info(
                "Node %s: PCI device %s is no longer held by domain %s (%s)",
                snap.node_uuid,
                h.address,
                h.domain_name,
                h.owner,
            )

    def mark_host_unavailable(self, reason):
        """The hypervisor cannot be read: refuse claims until it can."""
        self._host_metrics = ()  # a metric is a reading of now; there is none
        self._update("host_unavailable", None, lambda state: state.replace(unavailable=str(reason)))

    def set_placement_ratios(self, ratios):
        """Record the allocation ratios Placement holds for this node.

        Used for classes whose ratio is not configured: an operator may set
        it through the Placement API, and claims must use what Placement
        uses. Configured ratios still win. Durable when it returns.

        :raises StateError: the durable write failed; nothing changed.
        """
        ratios = frozen_map(ratios)
        if dict(ratios) == dict(self._state.placement_ratios):
            return  # the steady state: no lock, no write
        self._update(
            "set_placement_ratios", None, lambda state: state.with_inputs(placement_ratios=ratios)
        )

    def set_pool_usage(self, usage):
        """Record what Placement holds on the node's shared disk pool for
        other consumers (a :class:`~rtagent.tracker.pooldisk.PoolUsage`):
        claims count it as used, as Placement does. Not stored: after a
        restart the first sync reads it again before RPC starts."""
        if usage == self._state.pool_usage:
            return  # the steady state: no lock
        self._update("set_pool_usage", None, lambda state: state.with_inputs(pool_usage=usage))

    def set_policy(self, policy):
        """Apply new reserved amounts / ratios (config reload)."""
        self._update("set_policy", None, lambda state: state.with_inputs(policy=policy))

    def set_offered_resources(self, offered):
        """Resource class -> identifiers the node offers (assigned resources)."""
        offered = frozen_map({rc: tuple(sorted(ids)) for rc, ids in offered.items()})
        self._update("set_offered_resources", None, lambda state: state.replace(offered=offered))

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
        pending=False,
        extra_specs=None,
        image_properties=None,
        pci_requests=None,
        running_cpus=None,
        running_devices=None,
        states=None,
    ):
        """Claim ``flavor``'s resources for an instance; durable on return.

        Claiming again for the same instance and the same resources returns
        the existing claim, so a caller may safely retry, also after an
        attach (see :func:`.claims.claim_instance` for the exact rule).

        :param limits: nova's scheduler limits dict, or None.
        :param assigned: {resource class: count} of units claimed by
            identifier (see :mod:`.assigned`).
        :param pending: a standalone claim about to write its allocation:
            a claim this call creates stays *pending*, and other calls on
            the instance get :class:`ClaimPending`, until the caller passes
            the returned ``Claim.token`` to :meth:`settle_pending` or
            :meth:`roll_back_pending`.
        :param extra_specs, image_properties: the flavor's extra specs and
            the image's properties (nova's ``hw:*`` / ``hw_*`` keys): a
            guest that asks for a NUMA topology, pinned CPUs or a page size
            gets cells placed on the host's (``Claim.numa``), and counts
            its pinned vCPUs as PCPU (as VCPU in nova's upgrade fallback,
            on a host without ``cpu_dedicated_set``: docs/numa.md).
        :param pci_requests: the instance's PCI requests (a list of
            mappings, see :mod:`rtagent.pci.requests`): free devices of the
            node are chosen for them, in the same lock and write as the
            rest of the claim (``Claim.pci_devices``).
        :param running_cpus: the host CPUs the guest already runs pinned
            on, as its caller knows them (an instance claimed after the
            fact): its pinned vCPUs keep exactly the dedicated ones, or the
            claim is refused. None: the CPUs its domain on the host is
            pinned to, if any (see :mod:`rtagent.numa.running_pins`).
        :param running_devices: {request id: [PCI address]} of the devices
            the guest already runs with (an instance claimed after the
            fact): each named request takes exactly those, or the claim is
            refused (``DevicesUnavailable``).
        :param states: nova's ``vm_state``, ``task_state`` and ``os_type``
            of the instance (:func:`.requests.states_of`), for the
            scheduler's stats; a retried claim keeps the ones held.
        :raises InvalidClaimRequest: malformed UUID, flavor or limits.
        :raises InvalidConstraint: an extra spec or image property is
            invalid or conflicts with another.
        :raises rtagent.pci.errors.InvalidRequest: a PCI request is
            invalid (unknown alias, bad count or field).
        :raises NodeNotReady, HostUnavailable: claims cannot be checked now.
        :raises ComputeResourcesUnavailable: it does not fit; nothing changed.
        :raises rtagent.pci.errors.DevicesUnavailable: the PCI requests
            cannot be met; nothing changed.
        :raises InstanceClaimConflict: the instance holds a different claim.
        :raises ClaimPending: a standalone claim of the instance is in flight.
        :raises StateError: the durable write failed; nothing changed.
        """
        guest = requests.topology(flavor, extra_specs, image_properties)
        instance = requests.instance(
            instance_uuid,
            flavor,
            volume_backed=volume_backed,
            project_id=project_id,
            guest=guest,
            states=states,
        )
        checked_limits = ledger.check_limits(limits)
        pci = self._pci_requests(pci_requests, instance.uuid)
        token = next(self._tokens) if pending else None
        running = frozenset(running_cpus) if running_cpus is not None else None
        held = _running_devices(running_devices, pci)

        def claim(state):
            ctx = fit_context(state, self._count_untracked)
            new = claims.claim_instance(
                state,
                ctx,
                instance,
                checked_limits,
                assigned,
                guest=guest,
                pci_requests=pci,
                running_cpus=running,
                running_devices=held,
            )
            if new is not state and token is not None:
                new = new.with_pending(instance.uuid, token)
            return new

        with self._locked("instance_claim", instance.uuid):
            before = self._state
            self._commit(claim(before))
            created = self._state is not before
            held = self._state.instances[instance.uuid]
        if created:
            LOG.info("Claimed %s for instance %s", dict(held.resources), held.uuid)
            if held.numa is not None:
                LOG.info("Instance %s NUMA cells: %s", held.uuid, held.numa.describe())
            if held.pci_devices:
                LOG.info(
                    "Instance %s PCI devices: %s",
                    held.uuid,
                    ", ".join(f"{h.address} ({h.request_id})" for h in held.pci_devices),
                )
        token = token if created else None
        return Claim(
            held.uuid,
            self.node_uuid,
            held.resources,
            created,
            token,
            held.numa,
            held.pci_devices,
            frozenset(r.request_id for r in pci),
        )

    def _pci_requests(self, raw, instance_uuid):
        """``raw`` PCI requests checked against the node's ``[pci] alias``
        (before the lock: the options are the state's, immutable)."""
        if raw is None:
            return ()
        pci = self._state.pci
        aliases = pci.aliases if pci is not None else {}
        in_placement = pci.report_in_placement if pci is not None else False
        return pcirequests.parse(raw, aliases, instance_uuid, in_placement)

    def settle_pending(self, instance_uuid, token):
        """The standalone claim's allocation is in Placement: the claim is an
        ordinary claim now. A token that is not pending changes nothing."""

        def settle(state):
            if state.pending.get(instance_uuid) != token:
                return state
            return state.without_pending(instance_uuid)

        self._update("settle_pending", instance_uuid, settle)

    def roll_back_pending(self, instance_uuid, token, *, forget=False):
        """Undo the standalone claim that returned ``token``, and nothing
        else: a claim that is not (or no longer) that pending claim stays.

        If the durable write fails, the claim stays as an ordinary claim
        (logged as an error: abort it once the store works again) rather
        than pending for ever, which would refuse every call on it.

        :param forget: also forget it as released (Placement holds nothing
            of it, so healing has nothing to do).
        :returns: True if the claim was removed.
        """
        with self._locked("roll_back_pending", instance_uuid):
            if self._state.pending.get(instance_uuid) != token:
                return False
            new = claims.remove_instance(self._state, instance_uuid, token)
            try:
                self._commit(new.forget_released([instance_uuid]) if forget else new)
            except errors.StateError:
                # Pending is not durable: dropping it writes nothing.
                self._commit(self._state.without_pending(instance_uuid))
                LOG.error(
                    "Could not roll back the standalone claim of instance %s (the state "
                    "store failed); it stays claimed: abort it when the store works again",
                    instance_uuid,
                )
                return False
        LOG.info("Rolled back the standalone claim of instance %s", instance_uuid)
        return True

    def abort_instance_claim(self, instance_uuid):
        """Release an instance's claim. Returns False if there was none.

        :raises InvalidClaimRequest: malformed UUID.
        :raises ClaimPending: a standalone claim of the instance is in flight.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance_uuid = check_uuid(instance_uuid)
        with self._locked("abort_instance_claim", instance_uuid):
            if instance_uuid not in self._state.instances:
                return False
            self._commit(claims.remove_instance(self._state, instance_uuid))
        LOG.info("Released the claim of instance %s", instance_uuid)
        return True

    def update_instance(
        self, instance_uuid, *, vm_state=None, task_state=None, set_task=False, others=None
    ):
        """Record a nova state change. ``deleted`` and ``shelved_offloaded``
        release the instance's usage on this node; ``others`` sets
        ``os_type`` and ``project_id`` (the keys present).

        :raises InstanceNotFound: not tracked on this node.
        :raises ClaimPending: a standalone claim of the instance is in flight.
        """
        instance_uuid = check_uuid(instance_uuid)
        self._update(
            "update_instance",
            instance_uuid,
            lambda state: claims.update_instance(
                state, instance_uuid, vm_state, task_state, set_task, others=others
            ),
        )

    def attach_pci_devices(self, instance_uuid, pci_requests):
        """Give a claimed instance devices for more PCI requests (an
        interface attached to a running guest); durable on return.

        The devices are chosen as a claim chooses them (on the instance's
        NUMA cells when it has a NUMA claim) and held by the instance until
        :meth:`detach_pci_devices`, its abort or its delete. Attaching the
        same request ids and counts again returns the devices they hold.

        :param pci_requests: as :meth:`instance_claim` takes them; each
            needs its own ``request_id`` (a derived one would repeat those
            of the instance's claim).
        :returns: the :class:`~rtagent.pci.held.HeldDevice` values the
            requests hold, in the instance's order.
        :raises InvalidClaimRequest: malformed UUID.
        :raises rtagent.pci.errors.InvalidRequest: a request is invalid, or
            has no ``request_id``.
        :raises InstanceNotFound: no claim of the instance on this node.
        :raises DevicesConflict: a request id it holds with another count,
            or a move of it in progress on this node.
        :raises rtagent.pci.errors.DevicesUnavailable: the requests cannot
            be met; nothing changed.
        :raises ClaimPending: a standalone claim of the instance is in flight.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance_uuid = check_uuid(instance_uuid)
        unnamed = [
            n
            for n, r in enumerate(pci_requests)
            if not (isinstance(r, dict) and r.get("request_id"))
        ]
        if unnamed:
            raise pcierrors.InvalidRequest(
                field=f"pci_requests.{unnamed[0]}.request_id",
                reason="an attached device's request needs its own request_id",
            )
        pci = self._pci_requests(pci_requests, instance_uuid)
        with self._locked("attach_pci_devices", instance_uuid):
            before = self._state
            self._commit(claims.attach_devices(before, instance_uuid, pci))
            held = self._state.instances[instance_uuid].pci_devices
            created = self._state is not before
        ids = {r.request_id for r in pci}
        got = tuple(h for h in held if h.request_id in ids)
        if created:
            LOG.info(
                "Instance %s attached PCI devices: %s",
                instance_uuid,
                ", ".join(f"{h.address} ({h.request_id})" for h in got),
            )
        return got

    def detach_pci_devices(self, instance_uuid, addresses):
        """Give back the instance's devices at ``addresses`` (an interface
        detached); durable on return. Addresses it does not hold are
        ignored, so a retried detach is harmless.

        :returns: the addresses released.
        :raises InvalidClaimRequest: malformed UUID.
        :raises rtagent.pci.errors.InvalidRequest: an address is not one.
        :raises InstanceNotFound: no claim of the instance on this node.
        :raises DevicesConflict: a move of it is in progress on this node.
        :raises ClaimPending: a standalone claim of the instance is in flight.
        :raises StateError: the durable write failed; nothing changed.
        """
        instance_uuid = check_uuid(instance_uuid)
        wanted = [pci_address.canonical(a, field=f"addresses.{i}") for i, a in enumerate(addresses)]
        with self._locked("detach_pci_devices", instance_uuid):
            new, released = claims.detach_devices(self._state, instance_uuid, wanted)
            self._commit(new)
        if released:
            LOG.info("Instance %s detached PCI devices: %s", instance_uuid, ", ".join(released))
        return released

    def build_failed(self):
        """A build on this node failed (nova's failed_builds stat)."""
        self._update(
            "build_failed", None, lambda state: state.replace(failed_builds=state.failed_builds + 1)
        )

    def build_succeeded(self):
        self._update("build_succeeded", None, lambda state: state.replace(failed_builds=0))

    # -- moves -----------------------------------------------------------

    def start_move(
        self,
        *args,
        limits=None,
        assigned=None,
        extra_specs=None,
        image_properties=None,
        pci_requests=None,
        **request,
    ):
        """Record a move involving this node; at the destination, claim it.

        The move is described as :func:`rtagent.tracker.requests.migration`
        takes it (``new_flavor`` defaults to ``old_flavor``). Repeating the
        same start is harmless; see :func:`.moves.start_move` for what is
        checked. ``extra_specs`` and ``image_properties`` are the new
        flavor's and the image's, as for :meth:`instance_claim`: at the
        destination, the guest's NUMA cells are placed (the move's
        ``new_numa`` in the snapshot). ``pci_requests`` are the PCI
        requests the instance makes at the destination: there, devices are
        chosen for them (the move's ``new_pci``); they are checked on every
        node.

        :raises InvalidClaimRequest: malformed input, the move does not
            involve this node, or its old flavor is not the tracked one.
        :raises MoveConflict: the migration is recorded with other details.
        :raises rtagent.pci.errors.InvalidRequest: a PCI request is invalid.
        :raises ComputeResourcesUnavailable: the destination cannot fit it.
        :raises rtagent.pci.errors.DevicesUnavailable: the destination
            cannot meet the PCI requests.
        :raises StateError: the durable write failed; nothing changed.
        :returns: the :class:`~rtagent.tracker.model.Migration` as recorded
            (its ``new_numa`` and ``new_pci``: the cells placed and the
            devices chosen at the destination).
        """
        new_flavor = request.get("new_flavor") or request.get("old_flavor")
        guest = requests.topology(new_flavor, extra_specs, image_properties)
        migration = requests.migration(*args, guest=guest, **request)
        checked_limits = ledger.check_limits(limits)
        pci = self._pci_requests(pci_requests, migration.instance_uuid)

        def start(state):
            ctx = None
            if migration.dest_node == self.node_uuid:
                ctx = fit_context(state, self._count_untracked)
            return moves.start_move(
                state, ctx, migration, checked_limits, assigned, guest=guest, pci_requests=pci
            )

        state = self._update("start_move", migration.uuid, start)
        LOG.info("Move recorded: %s", migration.describe())
        # None only if it was dropped at once (never: a start records it).
        return state.migrations.get(migration.uuid)

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

        :returns: whether the node's state changed (nova's periodic repeats
            the service's state every minute; a repeat changes nothing).
        """
        disabled = None if reason is None else (str(reason) or "disabled")

        def apply(state):
            return state if state.disabled == disabled else state.replace(disabled=disabled)

        with self._locked("set_disabled"):
            before = self._state
            self._commit(apply(before))
            return self._state is not before

    def forget_released(self, instance_uuids):
        """Healing is done for these released consumers: stop tracking them."""
        uuids = frozenset(instance_uuids)
        self._update("forget_released", None, lambda state: state.forget_released(uuids))

    # -- readers (no lock) ---------------------------------------------------

    def snapshot(self):
        """A consistent, immutable copy of the node's state.

        Never waits for the tracker lock: it reads the last adopted state.
        """
        state = self._state
        published_state, snap = self._published
        if published_state is state:
            return snap
        snap = snapshot_of(state, self._count_untracked)
        self._published = (state, snap)
        return snap

    def host_metrics(self):
        """The host metrics of the last reading (``HostMetric`` values, nova's
        ``compute_monitors``); ``()`` when off, unavailable, or the host could
        not be read. Never waits for the tracker lock."""
        return self._host_metrics

    def compute_node_view(self, host_ip):
        """The compute-node dict a Nova scheduler reads (see :mod:`.view`).
        From the published snapshot if it is current, else from the sums
        the state carries (O(moves)): a view is asked for after every claim
        through nova's tracker, and a new snapshot sorts and sums every
        instance."""
        state, serial = self._stamped
        published_state, snap = self._published
        inputs = snap if published_state is state else view_inputs(state, self._count_untracked)
        pci = state.pci
        return view.compute_node(
            inputs,
            host_ip,
            metrics=self._host_metrics,
            pci_in_placement=pci.report_in_placement if pci is not None else False,
            revision={"incarnation": self._incarnation, "serial": serial},
        )


def _running_devices(running_devices, requests):
    """``running_devices`` as {request id: tuple of addresses in their one
    form}, or None. :raises rtagent.pci.errors.InvalidRequest: it names a
    request id the claim does not ask for, or an address is not one."""
    if not running_devices:
        return None
    asked = {r.request_id for r in requests or ()}
    unknown = sorted(set(running_devices) - asked)
    if unknown:
        raise pcierrors.InvalidRequest(
            reason=f"running_devices names request id(s) the claim does not ask for: "
            f"{', '.join(unknown)}",
            field="running_devices",
        )
    return {
        rid: tuple(
            pci_address.canonical(a, field=f"running_devices.{rid}.{i}")
            for i, a in enumerate(addrs)
        )
        for rid, addrs in running_devices.items()
    }
