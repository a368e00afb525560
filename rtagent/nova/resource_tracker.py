# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The ResourceTracker nova's ComputeManager calls, over the rtagent agent.

A facade with nova's method names and signatures (so that code patching
``nova.compute.resource_tracker.ResourceTracker.<method>`` patches these),
each made of the same few steps: mark the instance in flight
(:mod:`.inflight`), call the agent (the RPC API's request, :mod:`.link`),
write nova's rows (:mod:`.records`, the one object that takes nova's
``compute_resources`` lock and has no way to the agent), and save the
agent's compute-node view on the ComputeNode record. It keeps no usage of
its own: a claim is the agent's, and its reply carries the node's view, so
a claim costs one round trip.

The agent owns the node's provider tree in Placement (inventories, traits,
the disabled trait from the service's state); nova's report client keeps
only what ComputeManager asks of it directly (allocations of moves, deletes).
"""

import dataclasses
import logging

from nova import exception, objects
from nova.compute import utils as compute_utils
from nova.compute import vm_states
from oslo_utils import excutils

from rtagent.exception import RtagentError
from rtagent.nova import (
    abandoned,
    arguments,
    computenode,
    leftovers,
    metrics,
    migrations,
    numa,
    pcicalls,
    reconcile,
    tickets,
)
from rtagent.nova.inflight import InFlight
from rtagent.nova.link import AgentRefused, AgentUnreachable
from rtagent.nova.records import COMPUTE_RESOURCE_SEMAPHORE, NovaRecords

LOG = logging.getLogger(__name__)

__all__ = ["COMPUTE_RESOURCE_SEMAPHORE", "RtagentResourceTracker", "tracker_class"]
# Codes that mean "this node cannot take it": nova's ComputeResourcesUnavailable,
# on which nova reschedules a build and fails a move cleanly. Any other code
# (a request the agent finds malformed, an internal error) stays AgentRefused,
# an error in nova's log, not a quiet reschedule.
_REFUSED = frozenset(
    {
        "tracker.compute_resources_unavailable",
        "tracker.state_error",
        "tracker.node_not_found",
        "tracker.node_not_ready",
        "tracker.host_unavailable",
        "tracker.instance_claim_conflict",
        "tracker.move_conflict",
        "pci.devices_unavailable",
    }
)


class RtagentResourceTracker:
    """nova's ResourceTracker interface; accounting by the agent behind
    ``self.link`` (made by :meth:`make_link`, set by whoever installs this
    class: :func:`tracker_class`), nova's rows by ``self.records``.

    Each method reads as its steps: mark the instance in flight, call the
    agent, write the rows (``records``, under nova's lock), save the
    compute-node view. Only ``records`` takes nova's lock, and it cannot
    reach the agent.
    """

    make_link = None  # callable(host, driver, reportclient) -> link

    def __init__(self, host, driver, reportclient=None):
        if self.make_link is None:
            raise exception.NovaException("rtagent's tracker was installed without a link")
        self.host = host
        self.driver = driver
        self.reportclient = reportclient
        self.service_ref = None
        self.records = NovaRecords(host)
        # The attributes nova's ComputeManager reads (the records' own).
        self.compute_nodes = self.records.compute_nodes
        self.stats = self.records.stats
        # The agent reads host metrics (its own [DEFAULT] compute_monitors).
        self.monitors = []
        _warn_if_monitors_configured()
        self.provider_tree = None
        self._link = None
        self._in_flight = InFlight()
        self._sizes = computenode.SizeWarnings()
        # Kept across periodics: a move cut short is settled at its second
        # sighting (see abandoned).
        self._cut_short = abandoned.CutShort()

    @property
    def link(self):
        """The way to the agent, made on first use: ComputeManager builds
        its tracker before the virt driver's ``init_host``, when the
        driver cannot answer yet."""
        if self._link is None:
            self._link = self.make_link(self.host, self.driver, self.reportclient)
        return self._link

    # -- service and nodes -------------------------------------------------

    def set_service_ref(self, service_ref):
        if self.service_ref is not None and self.service_ref.id != service_ref.id:
            raise exception.ComputeServiceInUse(host=self.host)
        if service_ref.host != self.host:
            raise exception.ServiceNotUnique(host=self.host, binary=service_ref.binary)
        self.service_ref = service_ref

    def disabled(self, nodename):
        return nodename not in self.compute_nodes or not self.driver.node_is_available(nodename)

    def get_node_by_name(self, nodename):
        try:
            return self.compute_nodes[nodename]
        except KeyError:
            raise exception.ComputeHostNotFound(host=nodename) from None

    @property
    def pci_tracker(self):
        """nova's PciDevTracker of the rows (ComputeManager reads it for
        an SR-IOV port's device)."""
        return self.records.pci_tracker

    def remove_node(self, nodename):
        self.records.remove_node(nodename)

    def clean_compute_node_cache(self, compute_nodes_in_db):
        self.records.keep_nodes(compute_nodes_in_db)

    def update_available_resource(self, context, nodename, startup=False):
        """Audit the node (the agent reads the host and syncs Placement),
        reconcile the agent's claims with the instances and moves nova's
        database has on the node, and write the ComputeNode record."""
        reading = self.driver.get_available_resource(nodename)
        if not reading:
            LOG.warning("Virt driver does not report node %s", nodename)
            return
        resources = dict(reading, host_ip=_my_ip())
        stats = self.stats[nodename]
        stats.clear()
        stats.digest_stats(reading.get("stats"))
        if not resources.get("uuid"):
            from nova.virt import node as virt_node

            resources["uuid"] = virt_node.get_local_node_uuid()
        # The record first: virt drivers look it up while they describe
        # their provider tree (nova's libvirt driver does).
        service_id = self.service_ref.id if self.service_ref else None
        self.records.record_node(context, nodename, resources, service_id, _initial_ratios())
        self._sync_disabled(context, resources["uuid"])
        refused = None
        try:
            # The agent audits from this same reading: nova's own tracker
            # reads the driver once per periodic.
            self.link.audit(nodename, reading)
        except RtagentError as exc:
            # nova's callers (and its tests) know these failures by these
            # names; a PCI layout Placement cannot hold stops nova-compute
            # at start-up, as nova's own check does.
            LOG.error("Audit of node %s failed: %s", nodename, exc)
            code = getattr(exc, "code", None)
            if code == "pci.placement_layout_invalid":
                raise exception.PlacementPciException(error=str(exc)) from exc
            if code != "placement.inventory_in_use":
                raise exception.ResourceProviderSyncFailed() from exc
            # An inventory in use may be one the VCPU-to-PCPU reshape frees
            # once the agent knows every consumer of the node: an outgoing
            # move is learnt from nova's records in the reconciliation below
            # (its migration holds the source's VCPU). Sync again after it.
            refused = exc
        view = self._update_node(context, nodename)
        if refused is not None and not self.link.resync(resources["uuid"]):
            raise exception.ResourceProviderSyncFailed() from refused
        if view is not None:
            self._sizes.check(nodename, resources, view, _reserved())
            # Once per periodic audit, as nova's tracker.
            metrics.notify_update(context, self.host, _my_ip(), nodename, view.get("metrics"))

    def _update_node(self, context, nodename):
        """The periodic's reconciliation and ComputeNode write; the
        ordering with claims under way is :class:`.InFlight`'s."""
        cn = self.compute_nodes.get(nodename)
        if cn is None or self.disabled(nodename):
            return
        try:
            # One bulk read of each: no per-instance query or lazy load for
            # an instance the agent already holds.
            instances = objects.InstanceList.get_by_host_and_node(
                context, self.host, cn.hypervisor_hostname, expected_attrs=[]
            )
            moving = objects.MigrationList.get_in_progress_and_error(
                context, self.host, cn.hypervisor_hostname
            )
            records = reconcile.NodeRecords(self.host, cn, instances, moving)
            # First, so that a move it sets to error is reverted below like
            # any other; outside nova's lock (Placement calls).
            self._cut_short.settle(context, records, self._placement())
            status = reconcile.reconcile(
                self.link,
                context,
                records,
                adopt=self._adopt,
                depart=self._depart,
                claiming=self._in_flight.__contains__,
            )
            # The agent's report of the node's unknown consumers: a kept
            # move's allocation nova could not delete is deleted as nova meant.
            unknown = ((status.get("sync") or {}).get("placement") or {}).get("unknown_consumers")
            if unknown:
                leftovers.delete_kept(
                    context, self._placement(), self.host, cn.hypervisor_hostname, unknown
                )
            if self.records.has_pci_rows(nodename):
                # Without rows (most hosts), nova's lock is not taken at all.
                self.records.reconcile_pci(context, cn)
            return self._refresh_node(cn, rewrite=True)
        except AgentRefused as exc:
            if exc.code != "tracker.node_not_found":
                raise
            # The daemon audits another node: an operator's set-up mistake,
            # said on one line at each periodic, not a traceback.
            LOG.error(
                "The rtagent agent has no node %s (nova's node %s on host %s): nova's "
                "compute_id and the agent's state_path/compute_id must hold the same UUID "
                "(docs/nova.md); nothing is accounted for this node until they do",
                cn.uuid,
                nodename,
                self.host,
            )

    def _placement(self):
        """nova's report client: ComputeManager's, else the process's."""
        if self.reportclient is not None:
            return self.reportclient
        from nova.scheduler.client import report

        return report.report_client_singleton()

    def _sync_disabled(self, context, node_uuid):
        """The agent shows a disabled service as COMPUTE_STATUS_DISABLED."""
        try:
            service = objects.Service.get_by_compute_host(context, self.host)
        except exception.NotFound:
            return
        self._set_disabled(node_uuid, service)

    def update_compute_provider_status(self, context, node_uuid, enabled):
        """The service was enabled or disabled (nova's os-services API saved
        it, then asked this host): the agent sets or clears the node's
        COMPUTE_STATUS_DISABLED, in Placement when this returns. nova's
        ``ComputeVirtAPI.update_compute_provider_status`` comes here
        (:mod:`rtagent.nova.virtapi`); nova's own writes the trait through
        its report client, which has no provider cached beside rtagent."""
        try:
            service = objects.Service.get_by_compute_host(context, self.host)
        except exception.NotFound:
            service = None
        if service is None or bool(service.disabled) == enabled:
            # The record says otherwise (changed again since): the caller's
            # word is the newer one.
            service = _Status(disabled=not enabled, disabled_reason=None)
        self._set_disabled(node_uuid, service)
        # nova's API call waits for this one: the trait is in Placement when
        # it returns (at once in process; the daemon's prompt sync within a
        # second over RPC).
        self.link.publish(node_uuid)

    def _set_disabled(self, node_uuid, service):
        want = bool(service.disabled)
        args = {"node_uuid": node_uuid, "disabled": want}
        if want:
            args["reason"] = (service.disabled_reason or "disabled")[:255]
        try:
            self.link.call("set_disabled", **args)
        except AgentRefused as exc:
            if exc.code != "tracker.node_not_found":
                raise
            # A node the agent has not audited yet: the audit creates it,
            # and the next update sets its state.

    def _refresh_node(self, cn, rewrite=False, reply=None, ticket=None):
        """The ComputeNode record from the agent's view of ``cn``: the one
        ``reply`` (to a claim, asked for with ``ticket``) carries, else one
        asked for now (an agent older than RPC 1.9, a step whose reply
        carries none).

        :param rewrite: write every field of the view, changed or not (the
            periodic: see :func:`computenode.apply_view`).
        :returns: the view.
        """
        view = (reply or {}).get("compute_node")
        if view is None:
            ticket = self.records.view_ticket(cn)
            view = self.link.call("get_compute_node", node_uuid=cn.uuid)
        self.records.save_view(cn, view, ticket, rewrite)
        return view

    # -- instance claims ---------------------------------------------------

    def instance_claim(self, context, instance, nodename, allocations, limits=None):
        """The agent claims (it serialises claims under its own lock) and
        answers with the node's view; nova's lock is taken only for nova's
        rows, never across a call to the agent, so one build does not wait
        for another's round trip (docs/nova.md, "Claims and the periodic")."""
        if self.disabled(nodename):
            raise exception.ComputeResourcesUnavailable(
                reason=f"Attempt to claim resources for instance {instance.uuid} "
                f"on unknown node {nodename} failed"
            )
        cn = self.compute_nodes[nodename]
        with self._in_flight.mark(instance.uuid):
            # Before the call: the view its reply carries is of a state at
            # least as new as any asked for before (NovaRecords.save_view).
            ticket = self.records.view_ticket(cn)
            placed = self._refused_as_unavailable(
                instance.pci_requests, self._claim, context, instance, cn, limits
            )
            try:
                self.records.record_claim(context, instance, cn, placed)
            except Exception:
                # nova's rows do not place the instance here: the claim goes.
                with excutils.save_and_reraise_exception():
                    reconcile.release(self.link, cn, instance.uuid)
        self._refresh_node(cn, reply=placed, ticket=ticket)
        # nova's tracker asks its virt driver for the node's provider tree at
        # each claim, so a host change since the last periodic (a disk grown)
        # is in Placement before this instance can move. The embedded agent
        # hears no hypervisor events, so the build reads the node here: after
        # the agent's claim is committed and outside nova's lock (nova reads
        # under it), published by the prompt sync if it changed anything.
        self.link.reread(nodename)
        return tickets.Claim(context, instance, nodename, self)

    def _refused_as_unavailable(self, asked, call, *args):
        """``call(*args)``, with the agent's refusal of a claim raised as
        nova's ComputeResourcesUnavailable (see _REFUSED)."""
        try:
            return call(*args)
        except AgentRefused as exc:
            if exc.code not in _REFUSED:
                raise
            raise _unavailable(exc, with_pci=_asks_devices(asked)) from exc

    def _claim(self, context, instance, cn, limits, flavor=None, running=(), devices=None):
        """The agent's claim of ``instance`` on ``cn`` (with ``flavor``,
        default the instance's): its reply.

        :param running: the host CPUs the guest already runs pinned on (an
            instance adopted by the periodic), which its claim keeps.
        :param devices: {request id: addresses} of the PCI devices it
            already runs with (the same), which its claim keeps.
        """
        flavor = flavor or instance.flavor
        numa_request = self._numa_request(cn, flavor, instance.image_meta)
        if numa_request and running:
            numa_request["running_cpus"] = sorted(running)
        if devices:
            numa_request["running_devices"] = devices
        return self.link.call(
            "instance_claim",
            node_uuid=cn.uuid,
            instance_uuid=instance.uuid,
            flavor=arguments.flavor(flavor),
            volume_backed=bool(compute_utils.is_volume_backed_instance(context, instance)),
            project_id=arguments.project_id(instance),
            limits=arguments.limits(limits),
            **arguments.states(instance),
            **numa_request,
            **arguments.pci_args(arguments.pci_requests(instance.pci_requests)),
        )

    def _adopt(self, context, instance, cn, flavor, topology):
        """The periodic's claim of an instance nova has on ``cn`` and the
        agent does not hold (a first start beside nova's records): with
        ``flavor`` and the host CPUs ``topology`` pins it to, which it
        keeps (docs/numa.md, "Claimed where it runs"), and the PCI devices
        nova's rows give it, which it keeps too."""
        self._claim(
            context,
            instance,
            cn,
            None,
            flavor,
            numa.pinned_cpus(topology),
            devices=_devices_held(instance),
        )

    def _depart(self, context, instance, cn, migration):
        """The periodic's record of a move out of ``cn`` (docs/nova.md,
        "Moves at the source"): the source's agent then knows the move's
        migration consumer and counts the instance as gone once it left."""
        new_flavor = instance.new_flavor or instance.flavor
        self.link.call(
            "start_move",
            node_uuid=cn.uuid,
            migration_uuid=migration.uuid,
            instance_uuid=instance.uuid,
            migration_type=arguments.move_type(migration),
            source_node=cn.uuid,
            dest_node=migrations.dest_node_uuid(context, migration),
            old_flavor=arguments.flavor(instance.old_flavor or instance.flavor),
            new_flavor=arguments.flavor(new_flavor),
            volume_backed=bool(compute_utils.is_volume_backed_instance(context, instance)),
            project_id=arguments.project_id(instance),
            **arguments.states(instance),
            **self._numa_request(cn, new_flavor, instance.image_meta),
        )

    def _numa_request(self, cn, flavor, image_meta):
        """The claim's ``extra_specs`` and ``image_properties``; none on a
        node without NUMA cells, where nova's own claim does not check a
        guest's NUMA request either (nova's fake drivers; the default
        flavors of nova's tests ask for ``hw:numa_nodes=1``)."""
        if not self.records.has_cells(cn):
            return {}
        return {
            "extra_specs": numa.extra_specs(flavor),
            "image_properties": numa.image_properties(image_meta),
        }

    def abort_instance_claim(self, context, instance, nodename):
        cn = self.compute_nodes.get(nodename)
        with self._in_flight.mark(instance.uuid):
            try:
                # nova's rows first: see drop_move_claim.
                self.records.unrecord_claim(context, instance, nodename)
            finally:
                if cn is not None:
                    reconcile.release(self.link, cn, instance.uuid)
        if cn is not None:
            self._refresh_node(cn)

    def update_usage(self, context, instance, nodename):
        """Tell the agent of ``instance``'s new states.

        Stock nova's update is local and cannot fail, and nova's delete
        calls it before it deletes the instance's allocation: were an
        absent daemon to fail it, the server would end in ERROR with its
        guest gone and its allocation kept. So an unanswered call is logged
        and nova goes on; nothing is lost: the daemon's periodic
        reconciliation releases an instance nova has deleted or offloaded,
        and a call the broker still holds is served when the daemon is back.
        """
        cn = self.compute_nodes.get(nodename)
        if cn is None:
            return
        answered = True
        try:
            self.link.call(
                "update_instance",
                node_uuid=cn.uuid,
                instance_uuid=instance.uuid,
                vm_state=instance.vm_state,
                task_state=instance.task_state,
            )
        except AgentRefused as exc:
            if exc.code != "tracker.instance_not_found":
                raise
            return
        except AgentUnreachable as exc:
            LOG.warning(
                "Instance %s is now %s (task %s), but %s; nova goes on, and the "
                "daemon's periodic settles the instance's claim when it is back",
                instance.uuid,
                instance.vm_state,
                instance.task_state,
                exc,
            )
            answered = False
        if vm_states.allow_resource_removal(
            vm_state=instance.vm_state, task_state=instance.task_state
        ):
            self.records.free_pci(context, instance, nodename)
        if answered:
            self._refresh_node(cn)

    def build_failed(self, nodename):
        self._node_call("build_failed", nodename)

    def build_succeeded(self, nodename):
        self._node_call("build_succeeded", nodename)

    def _node_call(self, method, nodename):
        cn = self.compute_nodes.get(nodename)
        if cn is not None:
            self.link.call(method, node_uuid=cn.uuid)

    # -- moves -------------------------------------------------------------

    def rebuild_claim(
        self, context, instance, nodename, allocations, limits=None, image_meta=None, migration=None
    ):
        return self._move_claim(
            context,
            instance,
            instance.flavor,
            nodename,
            migration,
            move_type="evacuation",
            image_meta=image_meta,
            limits=limits,
        )

    def resize_claim(
        self,
        context,
        instance,
        flavor,
        nodename,
        migration,
        allocations,
        image_meta=None,
        limits=None,
    ):
        return self._move_claim(
            context, instance, flavor, nodename, migration, image_meta=image_meta, limits=limits
        )

    def live_migration_claim(self, context, instance, nodename, migration, limits, allocs):
        return self._move_claim(
            context,
            instance,
            instance.flavor,
            nodename,
            migration,
            move_type="live-migration",
            image_meta=instance.image_meta,
            limits=limits,
        )

    def _move_claim(
        self,
        context,
        instance,
        new_flavor,
        nodename,
        migration,
        move_type=None,
        image_meta=None,
        limits=None,
    ):
        """A move's claim at this destination: the migration row, the
        agent's ``start_move``, then the instance's migration context and
        device rows."""
        image_meta = image_meta or {}
        if self.disabled(nodename):
            raise exception.ComputeResourcesUnavailable(
                reason=f"Attempt to claim move resources for instance {instance.uuid} "
                f"on unknown node {nodename} failed"
            )
        cn = self.compute_nodes[nodename]
        move_image = image_meta or instance.image_meta
        new_requests = migrations.new_pci_requests(instance, new_flavor)
        host_ip = self.driver.get_host_ip_addr()
        with self._in_flight.mark(instance.uuid):
            migration = self.records.destination(
                context, instance, new_flavor, cn, migration, move_type=move_type, host_ip=host_ip
            )
            # A live migration keeps the instance's requests and their ids:
            # ComputeManager claims the devices for them (claim_pci_devices).
            asked = instance.pci_requests if migration.is_live_migration else new_requests
            ticket = self.records.view_ticket(cn)
            placed = self._refused_as_unavailable(
                asked,
                self._start_move,
                context,
                instance,
                cn,
                migration,
                new_flavor,
                move_image,
                limits,
                asked,
            )
            if migration.is_live_migration and _page_size_changed(instance, placed):
                # nova's own live-migration check, after the fit: the guest's
                # memory cannot change page size while it runs.
                reconcile.step(self.link, "revert_move", cn, migration.uuid)
                raise exception.ComputeResourcesUnavailable(
                    reason="Requested page size is different from current page size."
                )
            new_numa = self.records.placed_topology(cn, new_flavor, move_image, placed)
            try:
                self.records.record_move(
                    context,
                    instance,
                    cn,
                    migration,
                    placed,
                    new_numa=new_numa,
                    new_requests=new_requests,
                )
            except Exception:
                # nova's rows do not record the move here: the agent drops it.
                with excutils.save_and_reraise_exception():
                    reconcile.step(self.link, "revert_move", cn, migration.uuid)
        self._refresh_node(cn, reply=placed, ticket=ticket)
        return tickets.MoveClaim(
            context,
            instance,
            nodename,
            self,
            flavor=new_flavor,
            image_meta=image_meta,
            migration=migration,
            numa=new_numa,
        )

    def _start_move(self, context, instance, cn, migration, new_flavor, image, limits, asked):
        """The agent's ``start_move`` of ``instance`` to ``cn``: its reply."""
        return self.link.call(
            "start_move",
            node_uuid=cn.uuid,
            migration_uuid=migration.uuid,
            instance_uuid=instance.uuid,
            migration_type=arguments.move_type(migration),
            source_node=migrations.source_node_uuid(context, migration),
            dest_node=cn.uuid,
            old_flavor=arguments.flavor(instance.flavor),
            new_flavor=arguments.flavor(new_flavor),
            volume_backed=bool(compute_utils.is_volume_backed_instance(context, instance)),
            limits=arguments.limits(limits),
            project_id=arguments.project_id(instance),
            **arguments.states(instance),
            **self._numa_request(cn, new_flavor, image),
            **arguments.pci_args(arguments.pci_requests(asked)),
        )

    # A move's later steps: nova's rows first, under nova's lock in one
    # piece (the periodic's PCI reconciliation reads them under it, nova bug
    # 1896463), then the agent's step outside it. While the step is marked
    # in flight the periodic neither steps the move nor releases or claims
    # the instance (reconcile checks the mark after it reads the rows);
    # once the step is done, a periodic that read the rows before takes a
    # step the agent no longer applies.

    def drop_move_claim_at_source(self, context, instance, migration):
        """A move confirmed: the source lets the instance go."""
        cn = self.compute_nodes.get(migration.source_node)
        with self._in_flight.mark(instance.uuid):
            self.records.confirm(context, instance, migration)
            if cn is not None:
                reconcile.step(self.link, "finish_move", cn, migration.uuid)
                applied = reconcile.step(self.link, "confirm_move", cn, migration.uuid)
                if not applied and not _same_node(migration):
                    # The agent learnt of the move at the destination only:
                    # for this node the instance simply left. (At a
                    # same-node resize the claim is the instance's own.)
                    reconcile.release(self.link, cn, instance.uuid)
        if cn is not None:
            self._refresh_node(cn)

    def drop_move_claim_at_dest(self, context, instance, migration):
        """A move reverted: the destination lets the instance go back."""
        cn = self.compute_nodes.get(migration.dest_node)
        with self._in_flight.mark(instance.uuid):
            try:
                self.records.revert(context, instance, migration)
            finally:
                # Also when the instance's save found another task state
                # (nova's own tracker has dropped the claim by then), but
                # not when the migration's status could not be saved.
                if cn is not None and "status" not in migration.obj_what_changed():
                    applied = reconcile.step(self.link, "revert_move", cn, migration.uuid)
                    if not applied and not _same_node(migration):
                        # The agent holds the instance here without the
                        # move (adopted while the resize waited): for this
                        # node the instance simply goes back. Never at a
                        # same-node resize, where the claim is its own.
                        reconcile.release(self.link, cn, instance.uuid)
        if cn is not None:
            self._refresh_node(cn)

    def drop_move_claim(self, context, instance, nodename, flavor=None, prefix="new_"):
        """A move to ``nodename`` abandoned before it ran (its claim
        aborted, a live migration rolled back): nova's rows of the move's
        devices are freed, then the agent drops the instance's moves to
        this node."""
        cn = self.compute_nodes.get(nodename)
        if cn is None:
            return
        with self._in_flight.mark(instance.uuid):
            # nova's rows first, as every step here: a device the agent has
            # freed is free in the rows by then, so no claim under way gets
            # it from the agent while its row still names this instance.
            self.records.free_moved_pci(context, instance, nodename, prefix)
            for migration_uuid in self._moves_to(cn, instance.uuid):
                reconcile.step(self.link, "revert_move", cn, migration_uuid)
        self._refresh_node(cn)

    def _moves_to(self, cn, instance_uuid):
        """The UUIDs of the agent's moves of the instance to ``cn``."""
        try:
            held = self.link.call("get_instance", node_uuid=cn.uuid, instance_uuid=instance_uuid)
        except AgentRefused as exc:
            if exc.code != "tracker.instance_not_found":
                raise
            return []
        moves = held.get("moves") or ()
        return [m["migration_uuid"] for m in moves if m.get("dest_node") == cn.uuid]

    def finish_evacuation(self, instance, node, migration):
        """An evacuation landed here: nova's rows put the instance on
        ``node``, then the agent's move becomes a claim."""
        cn = self.compute_nodes.get(node) if node else None
        with self._in_flight.mark(instance.uuid):
            self.records.evacuated(instance, node, cn, migration)
            if migration and cn is not None:
                reconcile.step(self.link, "finish_move", cn, migration.uuid)
        if migration and cn is not None:
            self._refresh_node(cn)

    # -- Placement requests ComputeManager routes through the tracker --------

    def delete_allocation_for_evacuated_instance(self, context, instance, node, node_type="source"):
        cn_uuid = self.compute_nodes[node].uuid
        if not self.reportclient.remove_provider_tree_from_instance_allocation(
            context, instance.uuid, cn_uuid
        ):
            LOG.error(
                "Failed to clean allocation of evacuated instance on the %s node %s",
                node_type,
                cn_uuid,
                instance=instance,
            )

    def delete_allocation_for_shelve_offloaded_instance(self, context, instance):
        self.reportclient.delete_allocation_for_instance(context, instance.uuid, force=True)

    # -- PCI devices ComputeManager claims outside a claim ------------------

    def claim_pci_devices(self, context, pci_requests, instance_numa_topology=None):
        """The rows of the devices the agent chose for ``pci_requests``: at
        the destination of the instance's live migration, or for an
        interface attached to the instance where it runs (see
        :mod:`.pcicalls`).

        :raises PciDeviceRequestFailed: the agent chose no devices for
            these arguments.
        """
        if pci_requests is None or not pci_requests.requests:
            return []
        instance = _Uuid(pci_requests.instance_uuid)
        with self._in_flight.mark(instance.uuid):
            for nodename, cn in list(self.compute_nodes.items()):
                chosen = pcicalls.devices_for(self.link, context, cn, pci_requests)
                if chosen is not None:
                    return self.records.claim_pci(context, instance, nodename, chosen)
        raise exception.PciDeviceRequestFailed(requests=pci_requests.requests)

    def unclaim_pci_devices(self, context, pci_device, instance):
        """An interface's device given back (detached, or its attach
        failed): nova's row is freed, then the agent's claim lets it go."""
        with self._in_flight.mark(instance.uuid):
            # The row first: see drop_move_claim.
            self.records.free_device(context, pci_device, instance)
            for cn in list(self.compute_nodes.values()):
                pcicalls.detach(self.link, cn, instance.uuid, pci_device.address)

    def allocate_pci_devices_for_instance(self, context, instance):
        self.records.allocate_pci_devices_for_instance(context, instance)

    def free_pci_device_allocations_for_instance(self, context, instance):
        self.records.free_pci_device_allocations_for_instance(context, instance)

    def free_pci_device_claims_for_instance(self, context, instance):
        self.records.free_pci_device_claims_for_instance(context, instance)


@dataclasses.dataclass(frozen=True)
class _Status:
    """A service's status where its record is not at hand."""

    disabled: bool
    disabled_reason: str | None


class _Uuid:
    """What the rows need of an instance known by its UUID only."""

    def __init__(self, uuid):
        self.uuid = uuid


def tracker_class(make_link):
    """A ResourceTracker class whose instances reach the agent through
    ``make_link(host, virt_driver, reportclient)``: the class to put in
    place of nova's."""
    return type(
        "ResourceTracker", (RtagentResourceTracker,), {"make_link": staticmethod(make_link)}
    )


def _unavailable(refusal, with_pci=False):
    """nova's exception for the agent's refusal of a claim (see _REFUSED).

    A refusal of the guest's NUMA cells (a ``NUMA:`` line among the
    reasons, docs/rpc-api.md) is said in nova's own claim's words first,
    which operators and nova's tests know, then in the agent's."""
    said = f"{refusal.code}: {refusal.message}"
    reasons = refusal.details.get("reasons") or ()
    if any(str(reason).startswith("NUMA:") for reason in reasons):
        together = " together with requested PCI devices" if with_pci else ""
        said = (
            f"Requested instance NUMA topology{together} cannot fit the given host NUMA "
            f"topology ({said})"
        )
    return exception.ComputeResourcesUnavailable(reason=said)


def _devices_held(instance):
    """{request id: addresses} of the PCI devices nova's rows give
    ``instance`` for its requests (one query, only for an instance with
    PCI requests), or None."""
    if not _asks_devices(instance.pci_requests):
        return None
    asked = {r.request_id for r in instance.pci_requests.requests}
    held = {}
    for dev in instance.pci_devices or ():
        if dev.request_id in asked:
            held.setdefault(dev.request_id, []).append(dev.address)
    return {rid: sorted(addresses) for rid, addresses in held.items()} or None


def _asks_devices(pci_requests):
    """Whether nova's ``InstancePCIRequests`` (or None) ask for a device."""
    return bool(pci_requests is not None and pci_requests.requests)


def _page_size_changed(instance, placed):
    """Whether a live migration's destination cells (the agent's reply)
    are backed by another page size than the guest's cells now (nova
    compares the first cells: one page size serves every cell)."""
    current = instance.numa_topology
    cells = (placed or {}).get("numa")
    if not current or not current.cells or not cells:
        return False
    return cells[0].get("pagesize_kb") != current.cells[0].pagesize


def _warn_if_monitors_configured():
    from nova.conf import CONF

    if CONF.compute_monitors:
        LOG.warning(
            "[DEFAULT] compute_monitors (%s) of nova.conf is not read with rtagent as the "
            "resource tracker: host metrics come from the rtagent agent, set the same "
            "option in its configuration (docs/nova.md)",
            ",".join(CONF.compute_monitors),
        )


def _my_ip():
    from nova.conf import CONF

    return CONF.my_ip


def _same_node(migration):
    return (migration.source_compute, migration.source_node) == (
        migration.dest_compute,
        migration.dest_node,
    )


def _reserved():
    """The reserved amounts nova.conf takes off the host's sizes."""
    from nova.conf import CONF

    return {
        "vcpus": CONF.reserved_host_cpus,
        "memory_mb": CONF.reserved_host_memory_mb,
        "local_gb": CONF.reserved_host_disk_mb // 1024,
    }


def _initial_ratios():
    from nova.conf import CONF

    return {
        "cpu_allocation_ratio": CONF.initial_cpu_allocation_ratio,
        "ram_allocation_ratio": CONF.initial_ram_allocation_ratio,
        "disk_allocation_ratio": CONF.initial_disk_allocation_ratio,
    }
