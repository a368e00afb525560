"""One audit: read the host, account under the lock, publish outside it.

This is the whole data path of a tick, in the order that keeps every
tracker lock free of I/O:

1. ``driver.read_nodes()``          hypervisor calls, no lock held;
2. ``tracker.update_host(view)``     per node, lock held: memory only;
3. ``desired_tree(snapshot)``        pure (PCI providers included), then merged
                                     with provider configs;
4. ``sync.sync(desired)``            per node, Placement calls, no lock held;
5. ``tracker.set_placement_ratios``  lock held: memory and one local write;
6. healing of released consumers     Placement calls, no lock held.

Steps 4 to 6 are one node's :class:`~rtagent.placement.publisher.NodePublisher`.

Between audits, :meth:`Agent.sync_changed` runs steps 3 to 6 alone for
nodes whose accounting changed (the prompt sync,
:mod:`rtagent.placement.prompt`): the tree comes from the tracker's
snapshot and the last host reading's driver traits, so no hypervisor call
is made. The audit's publishing and the prompt sync's are serialised by
one mutex of their own; claims never take it.
"""

import dataclasses
import json
import logging
import threading
import time

from rtagent import exception
from rtagent.placement import errors as placement_errors
from rtagent.placement import pci_providers, standalone
from rtagent.placement.desired import desired_tree
from rtagent.placement.tree import ProviderTree
from rtagent.tracker import errors as tracker_errors
from rtagent.tracker import ledger
from rtagent.virt.errors import HostReadError, HypervisorUnavailable

LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """:param snapshot, sync: the primary node's snapshot and sync result
        (None while its sync backs off after failures).
    :param nodes: node UUID -> (snapshot, sync result, None, or the error).
    """

    snapshot: object
    sync: object
    seconds: float
    nodes: dict = dataclasses.field(default_factory=dict)


class Agent:
    """Ties a host driver, the node trackers and their publishers together.

    Claims go straight to a tracker (``agent.tracker`` for the primary
    node, ``agent.nodes.get(uuid)`` for others); they never wait for an
    audit's I/O.

    :param driver: the host driver (:class:`rtagent.virt.driver.HostDriver`).
    :param nodes: a :class:`rtagent.tracker.nodes.NodeSet`.
    :param make_publisher: callable(node_uuid) -> a new
        :class:`~rtagent.placement.publisher.NodePublisher` for that node.
    :param store: the state store, closed with the agent (``store``: health
        checks read its ``write_failure``).
    :param client: the PlacementClient, for standalone claims.
    :param provider_configs: a ProviderConfigSource, or None.
    :param pci_in_placement: ``[pci] report_in_placement``: the node's PCI
        devices are child providers (see :mod:`rtagent.placement.pci_providers`).
    """

    def __init__(
        self,
        driver,
        nodes,
        make_publisher,
        *,
        store=None,
        client=None,
        provider_configs=None,
        pci_in_placement=False,
        clock=time.monotonic,
    ):
        self.driver = driver
        self.pci_in_placement = pci_in_placement
        self.nodes = nodes
        self.provider_configs = provider_configs
        self._make_publisher = make_publisher
        self._client = client
        self.store = store
        self._clock = clock
        self._publishers = {}
        # The audit thread owns the publishers and their caches. Other
        # threads (signals, RPC, HTTP status) only read under this mutex, or
        # leave requests that the next audit applies in its own thread.
        self._mutex = threading.Lock()
        # One publishing thread at a time (the audit's, the prompt sync's):
        # a node's sync and passes keep state between runs. Held across
        # Placement calls, so only publishers ever take it.
        self._publishing = threading.Lock()
        # node UUID -> the traits its driver reported at the last reading,
        # for trees built between readings.
        self._driver_traits = {}
        self._pending_invalidate = False
        self._pending_config_location = None

    @property
    def tracker(self):
        """The primary node's tracker."""
        return self.nodes.primary

    @property
    def sync(self):
        """The primary node's Placement sync."""
        return self.publisher(self.nodes.primary_uuid).sync

    def publisher(self, node_uuid):
        """The :class:`NodePublisher` of ``node_uuid`` (made on first use)."""
        with self._mutex:
            publisher = self._publishers.get(node_uuid)
            if publisher is None:
                publisher = self._publishers[node_uuid] = self._make_publisher(node_uuid)
            return publisher

    def audit(self):
        """Run one audit tick over every node.

        A failing node does not stop the others; the first error is raised
        after all nodes were tried. A node whose sync failed is retried
        with a jittered backoff (no request until it is due).

        :raises rtagent.virt.errors.VirtError: the host could not be read;
            claims are refused until it can.
        :raises rtagent.placement.errors.PlacementError: a sync failed;
            local accounting is up to date and a later tick retries.
        """
        started = self._clock()
        with self._publishing:
            self._apply_requests()
        try:
            views = self.driver.read_nodes()
        except HypervisorUnavailable as exc:
            # Claims checked against a host we cannot see could oversubscribe
            # it; refuse them until the next successful read.
            for tracker in self.nodes.trackers():
                tracker.mark_host_unavailable(exc)
            raise
        read = self._read(views)
        with self._publishing:
            results, errors = self._publish(self._desired(read), reshapes=True)
            with self._mutex:
                for gone in self.nodes.removed:
                    self._publishers.pop(gone, None)
                    self._driver_traits.pop(gone, None)
        if errors:
            raise errors[0]
        if not results:
            # A driver that lists no node (nova's mocked drivers): one line
            # at the caller, not a bare StopIteration.
            raise HostReadError(what="nodes", reason="the driver lists none")
        primary = results.get(self.nodes.primary_uuid) or next(iter(results.values()))
        return AuditResult(primary[0], primary[1], self._clock() - started, results)

    def sync_changed(self, node_uuids=None):
        """Sync the nodes in ``node_uuids`` (every node if None) from their
        trackers' state now, without reading the host: the prompt sync of
        a local change. Nodes not audited yet are left to their first
        audit. A node's failure is logged and backs its sync off, as at an
        audit; nothing is raised for it.

        :returns: node UUID -> (snapshot, sync result or the error).
        """
        with self._publishing:
            published = [
                (t, t.snapshot())
                for t, _ in self._published()
                if t.node_uuid in self._driver_traits
            ]
            pending = [
                entry
                for entry in self._desired(published)
                if node_uuids is None or entry[1].node_uuid in node_uuids
            ]
            results, _ = self._publish(pending, quiet_backoff=True)
        return results

    def take_reading(self, views):
        """Hand known nodes a host reading taken outside the audit (the
        embedded agent: nova's build thread reads the node after its claim,
        as nova's tracker asks its virt driver at each claim). Nothing is
        synced and no node is added or removed here; the caller asks the
        prompt sync for the nodes returned, and the audit stays in charge
        of the node list.

        :returns: UUIDs of the nodes whose reading changed their state.
        """
        trackers = list(self.nodes.trackers())
        by_uuid = {t.node_uuid: t for t in trackers}
        by_name = {t.hypervisor_hostname: t for t in trackers}
        changed = set()
        for view in views:
            if view.node_uuid:
                tracker = by_uuid.get(view.node_uuid)
            else:
                tracker = by_name.get(view.hypervisor_hostname)
            if tracker is None:
                continue  # a node the audit has not added yet
            node_uuid = tracker.node_uuid
            traits = getattr(view, "traits", frozenset())
            with self._mutex:
                known_traits = self._driver_traits.get(node_uuid)
                self._driver_traits[node_uuid] = traits
            # No snapshot is built here (O(instances)): a build reads the
            # node after each claim, and filling a host must stay linear.
            if tracker.take_reading(view) or traits != known_traits:
                changed.add(node_uuid)
        return changed

    def _read(self, views):
        """Hand each node its reading. :returns: [(tracker, snapshot)]."""
        read = []
        for tracker, view in self.nodes.assign(views):
            snapshot = tracker.update_host(view)
            with self._mutex:
                self._driver_traits[snapshot.node_uuid] = getattr(view, "traits", frozenset())
            read.append((tracker, snapshot))
        return read

    def _publish(self, pending, quiet_backoff=False, reshapes=False):
        """Publish each node of ``pending`` (see :meth:`_desired`); a failing
        node does not stop the others. :returns: (node UUID -> (snapshot,
        outcome), errors).

        :param reshapes: whether ``pending`` comes from the reading just
            taken (the audit): only then are the allocations a driver moved
            at that reading written (a later sync of the same reading would
            write them a second time, against consumers that moved on
            since), and only then can an unknown consumer be confirmed.
        """
        results, errors = {}, []
        for tracker, snapshot, desired, pci in pending:
            publisher = self.publisher(snapshot.node_uuid)
            try:
                if isinstance(desired, exception.RtagentError):
                    # Not synced, and health and status must say why.
                    publisher.backoff.record_failure(desired)
                    raise desired
                moved = getattr(snapshot.host, "driver_allocations", None) if reshapes else None
                outcome = publisher.publish(
                    tracker,
                    desired,
                    held=pci.held,
                    drop=pci.drop,
                    driver_allocations=json.loads(moved) if moved else None,
                    # Only the audit's syncs confirm an unknown consumer.
                    audit=reshapes,
                )
                self._tell_driver(snapshot.node_uuid, outcome)
            except placement_errors.SyncBackingOff as exc:
                # A prompt sync leaves a backing-off node to its retry, which
                # the audit loop runs when it is due.
                log = LOG.debug if quiet_backoff else LOG.warning
                log("Sync of node %s failed: %s", snapshot.node_uuid, exc)
                errors.append(exc)
                outcome = exc
            except exception.RtagentError as exc:
                LOG.warning("Sync of node %s failed: %s", snapshot.node_uuid, exc)
                errors.append(exc)
                outcome = exc
            results[snapshot.node_uuid] = (snapshot, outcome)
        return results, errors

    def _tell_driver(self, node_uuid, outcome):
        """Hand the driver the tree Placement holds now (HostDriver.published)."""
        if outcome.tree is not None:
            self.driver.published(node_uuid, outcome.tree)

    def _desired(self, read):
        """(tracker, snapshot, desired tree, PCI report) per node of
        ``read`` ([(tracker, snapshot)]), configs merged in. A node whose
        PCI devices cannot be reported has its error in place of its tree:
        its sync stops until the spec is fixed (nova's periodic fails the
        same way), the other nodes go on."""
        managed = self.driver.managed_traits
        pending = []
        for tracker, snapshot in read:
            try:
                pci = pci_providers.report(snapshot, self.pci_in_placement)
            except exception.RtagentError as exc:
                pending.append((tracker, snapshot, exc, pci_providers.Report()))
                continue
            desired = desired_tree(
                snapshot,
                children=pci.layout.providers,
                driver_traits=self._driver_traits.get(snapshot.node_uuid, frozenset()),
                managed_traits=managed,
            )
            pending.append((tracker, snapshot, desired, pci))
        if self.provider_configs is not None:
            trees = {s.node_uuid: d for _, s, d, _ in pending if isinstance(d, ProviderTree)}
            merged = self.provider_configs.apply_all(trees)
            pending = [(t, s, merged.get(s.node_uuid, d), p) for t, s, d, p in pending]
        return pending

    def plan(self):
        """A dry run of one audit: read the host, and for every node the
        desired tree and the operations a sync would send. Reads Placement,
        writes nothing there. :returns: list of (snapshot, desired, ops)."""
        planned = []
        read = self._read(self.driver.read_nodes())
        with self._publishing:
            for _tracker, snapshot, desired, _pci in self._desired(read):
                if isinstance(desired, exception.RtagentError):
                    raise desired
                ops = self.publisher(snapshot.node_uuid).sync.plan(desired)
                planned.append((snapshot, desired, ops))
        return planned

    def invalidate_placement_cache(self):
        """Forget every node's cached Placement view. Safe from any thread:
        the next audit does it, in the audit thread."""
        with self._mutex:
            self._pending_invalidate = True

    def reload_provider_config(self, conf):
        """Re-read provider config files at the next audit (SIGHUP). Safe
        from any thread. A bad file keeps the last good configuration."""
        with self._mutex:
            self._pending_config_location = conf.compute.provider_config_location

    def _apply_requests(self):
        """Apply what other threads asked for, in the audit thread."""
        with self._mutex:
            invalidate, self._pending_invalidate = self._pending_invalidate, False
            location, self._pending_config_location = self._pending_config_location, None
            publishers = list(self._publishers.values())
        if location is not None and self.provider_configs is not None:
            self.provider_configs.reload(location)
        if invalidate:
            for publisher in publishers:
                publisher.sync.invalidate()

    def claim_standalone(self, instance_uuid, flavor, *, project_id, user_id, node_uuid=None, **kw):
        """Claim locally and write the allocation to Placement ourselves
        (no Nova scheduler); a refusal by Placement rolls the claim back.

        See :func:`rtagent.placement.standalone.claim_standalone`.
        """
        tracker = self.nodes.get(node_uuid) if node_uuid else self.tracker
        pci_allocations = None
        if self.pci_in_placement:

            def pci_allocations(held):
                report = pci_providers.report(tracker.snapshot(), True)
                return report.layout.allocations(held)

        return standalone.claim_standalone(
            tracker,
            self._client,
            instance_uuid,
            flavor,
            project_id=project_id,
            user_id=user_id,
            pci_allocations=pci_allocations,
            **kw,
        )

    def _published(self):
        """(tracker, publisher) of every node that has been published."""
        with self._mutex:
            publishers = dict(self._publishers)
        pairs = []
        for tracker in self.nodes.trackers():
            publisher = publishers.get(tracker.node_uuid)
            if publisher is not None:
                pairs.append((tracker, publisher))
        return pairs

    def retry_in(self):
        """Seconds until the earliest retry of a failed sync (the loop wakes
        for it, see :mod:`rtagent.placement.backoff`), or None when none is
        pending. Safe from any thread."""
        with self._mutex:
            publishers = list(self._publishers.values())
        pending = [t for t in (p.backoff.pending_retry() for p in publishers) if t is not None]
        return min(pending, default=None)

    def sync_status(self):
        """node UUID -> sync state (in sync, last success, last error,
        unknown consumers, healing backlog)."""
        return {
            tracker.node_uuid: publisher.status(tracker.snapshot().known_consumers)
            for tracker, publisher in self._published()
        }

    def root_figures(self, view):
        """The inventories this agent publishes on the root provider of
        ``view``'s node for that reading, as Placement records with the
        ratios Placement holds (the initial ratios where it holds none yet):
        what nova's virt driver is handed as the root of its provider tree
        (:meth:`rtagent.nova.hostdriver.NovaHostDriver.bind`)."""
        try:
            tracker = self.nodes.get(view.node_uuid)
        except tracker_errors.NodeNotFound:
            tracker = self.nodes.primary  # a new node: the same policy
        with self._mutex:
            publisher = self._publishers.get(view.node_uuid)
        ratios = publisher.sync.placement_ratios(view.node_uuid) if publisher else {}
        invs = ledger.inventories(view, tracker.policy, placement_ratios=ratios)
        return {rc: inv.to_placement() for rc, inv in invs.items()}

    def tree_allocations(self, node_uuid):
        """{consumer: its ``GET /allocations/{consumer}``} for every consumer
        holding anything on the tree of ``node_uuid`` in Placement: one GET
        for the tree, one per provider and one per consumer (a reshape a
        virt driver asks for, at most once per start-up).

        :raises PlacementError: Placement could not be read.
        """
        consumers = set()
        for entry in self._client.list_tree(node_uuid):
            consumers |= set(self._client.get_provider_allocations(entry["uuid"])[1])
        return {c: self._client.get_allocations(c) for c in sorted(consumers)}

    def report_unknown_consumers(self, node_uuid=None):
        """Check now (one GET per provider) for allocations on our providers
        held by consumers this agent does not know; reported (log, status,
        metrics), never deleted. :returns: {consumer: allocations}."""
        node_uuid = node_uuid or self.nodes.primary_uuid
        with self._publishing:
            return self.publisher(node_uuid).report_unknown(self.nodes.get(node_uuid))

    def unknown_consumers(self):
        """node UUID -> {consumer: allocations} as last reported, less the
        consumers known since."""
        return {
            tracker.node_uuid: publisher.unknown(tracker.snapshot().known_consumers)
            for tracker, publisher in self._published()
        }

    def close(self):
        """Close the hypervisor connection and the state store."""
        self.driver.close()
        if self.store is not None:
            self.store.close()
