# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova's database rows that rtagent's tracker keeps, written under nova's
``compute_resources`` lock: the one object that takes that lock.

nova's other services read these rows, not the agent: the instance's host,
node, NUMA topology and migration context, the migration's destination and
status, nova's PciDevice rows of the devices the agent chose, and the
ComputeNode record (os-hypervisors, the scheduler's HostState). nova's own
code takes the same lock around the same rows (its periodic's PCI cleanup,
its tests' patches), so every write here keeps to it.

:class:`NovaRecords` holds no way to the agent: nothing done under the lock
can wait for the agent, by construction. What the agent answered is handed
in (its reply to a claim, a compute-node view); the facade
(:mod:`.resource_tracker`) calls the agent before or after.
"""

import collections
import threading

from nova import objects, utils
from nova.compute import stats as compute_stats
from nova.compute import task_states, vm_states

from rtagent.nova import computenode, migrations, numa, pcirows

COMPUTE_RESOURCE_SEMAPHORE = "compute_resources"

# Every public method that writes a row takes nova's lock for itself, once;
# the private ones run inside them.
_under_novas_lock = utils.synchronized(COMPUTE_RESOURCE_SEMAPHORE, fair=True)


class NovaRecords:
    """The rows of one compute service (``host``) and its nodes.

    ``compute_nodes`` ({nodename: ComputeNode}) and ``stats`` ({nodename:
    nova's Stats of the virt driver's reading}) are the objects nova's
    ComputeManager reads through its tracker's attributes of those names.
    """

    def __init__(self, host):
        self.host = host
        self.compute_nodes = {}
        self.stats = collections.defaultdict(compute_stats.Stats)
        # nodename -> NovaPciRows: nova's PciDevice rows, kept to the
        # devices the agent chooses.
        self._pci_rows = {}
        # nodename -> the virt driver's numa_topology at the last audit.
        self._driver_numa = {}
        # node UUIDs whose last compute-node view had no NUMA cells.
        self._without_cells = set()
        # node UUID -> the ticket of the last view asked for, and the
        # (ticket, revision) of the last one saved (see save_view).
        self._tickets = collections.Counter()
        self._saved = {}
        self._tickets_mutex = threading.Lock()

    # -- nodes -------------------------------------------------------------

    @property
    def pci_tracker(self):
        """nova's PciDevTracker of the rows; nova tracks PCI devices on
        single-node hosts only, so the first node's."""
        rows = next(iter(self._pci_rows.values()), None)
        return rows.tracker if rows is not None else None

    def remove_node(self, nodename):
        self._pci_rows.pop(nodename, None)
        self.stats.pop(nodename, None)
        self._driver_numa.pop(nodename, None)
        self.compute_nodes.pop(nodename, None)

    @_under_novas_lock
    def keep_nodes(self, compute_nodes_in_db):
        """Forget the nodes nova's database no longer has."""
        keep = {cn.hypervisor_hostname for cn in compute_nodes_in_db}
        for nodename in set(self.compute_nodes) - keep:
            self.remove_node(nodename)

    @_under_novas_lock
    def record_node(self, context, nodename, resources, service_id, ratios):
        """The ComputeNode record (found or created) and its PCI rows, from
        the virt driver's ``resources``."""
        self._driver_numa[nodename] = resources.get("numa_topology")
        cn = self.compute_nodes.get(nodename)
        if cn is None:
            cn, _created = computenode.find_or_create(
                context, self.host, service_id, resources, ratios
            )
            self.compute_nodes[nodename] = cn
        else:
            computenode.copy_driver_facts(cn, resources)
        rows = self._pci_rows.get(nodename)
        if rows is None:
            rows = self._pci_rows[nodename] = pcirows.NovaPciRows(context, cn)
        rows.update_devices(resources)
        rows.save(context)

    def has_pci_rows(self, nodename):
        rows = self._pci_rows.get(nodename)
        return rows is not None and not rows.empty

    @_under_novas_lock
    def reconcile_pci(self, context, cn):
        """nova's rows of instances no longer on the node (and in no move
        through it) are freed, as nova's ``clean_usage`` (the agent
        released their claims before); those of instances on it are
        allocated.

        Reads included: which rows to free is decided on the instances and
        the migrations read together, with no move step (which changes them
        under this lock) in between. Read apart, a move that ends between
        the two reads leaves its instance in neither, and its devices are
        freed (nova bug 1896463, which nova's ``regressions.test_bug_1896463``
        forces). Only nodes with PCI rows (:meth:`has_pci_rows`) need this."""
        nodename = cn.hypervisor_hostname
        rows = self._pci_rows.get(nodename)
        if rows is None:
            return  # the node was dropped meanwhile
        instances = objects.InstanceList.get_by_host_and_node(
            context, self.host, nodename, expected_attrs=[]
        )
        moving = objects.MigrationList.get_in_progress_and_error(context, self.host, nodename)
        kept = [
            i
            for i in instances
            if not vm_states.allow_resource_removal(vm_state=i.vm_state, task_state=i.task_state)
        ]
        rows.clean(kept, moving)
        for instance in kept:
            # Claimed rows of an instance that is here now (a move landed)
            # become allocated, as at nova's own periodic.
            rows.allocate(instance)
        rows.save(context)

    # -- the ComputeNode record from the agent's views -----------------------

    def view_ticket(self, cn):
        """A ticket for a view of ``cn`` about to be asked for: tickets
        order the views of agents whose revisions cannot (see save_view)."""
        with self._tickets_mutex:
            self._tickets[cn.uuid] += 1
            return self._tickets[cn.uuid]

    def has_cells(self, cn):
        """Whether the agent's last view of ``cn`` had NUMA cells."""
        return cn.uuid not in self._without_cells

    @_under_novas_lock
    def save_view(self, cn, view, ticket, rewrite=False):
        """Write the agent's compute-node ``view`` on ``cn``'s record unless
        a later one was written already, so that the record never goes back
        to an older state of the node.

        Views of one agent incarnation are ordered by their ``revision``
        (docs/rpc-api.md, ``get_compute_node``): exactly the order of the
        states they show. Others (an agent restarted, or one older than
        RPC 1.9) by their tickets: the order in which they were asked for.

        :param rewrite: write every field of the view, changed or not (the
            periodic: see :func:`computenode.apply_view`).
        :returns: whether it was written.
        """
        if not self._newer(cn.uuid, view, ticket):
            return False
        last_ticket = self._saved.get(cn.uuid, (0, None))[0]
        self._saved[cn.uuid] = (max(ticket, last_ticket), view.get("revision"))
        if view.get("numa_topology"):
            self._without_cells.discard(cn.uuid)
        else:
            self._without_cells.add(cn.uuid)
        nodename = cn.hypervisor_hostname
        computenode.apply_view(
            cn,
            view,
            self._driver_numa.get(nodename),
            driver_stats=self.stats.get(nodename),
            rewrite=rewrite,
        )
        computenode.save_if_changed(cn)
        return True

    def _newer(self, node_uuid, view, ticket):
        saved = self._saved.get(node_uuid)
        if saved is None:
            return True
        saved_ticket, saved_revision = saved
        revision = view.get("revision")
        if (
            revision is not None
            and saved_revision is not None
            and revision.get("incarnation") == saved_revision.get("incarnation")
        ):
            # Equal serials show the same accounting: the later one asked
            # for may carry newer metrics, and the periodic's rewrite.
            return revision.get("serial", 0) >= saved_revision.get("serial", 0)
        return ticket > saved_ticket

    # -- a claim ---------------------------------------------------------------

    def placed_topology(self, cn, flavor, image_meta, reply):
        """The instance NUMA topology of the agent's ``reply`` to a claim
        or move on ``cn``: None on a node without NUMA cells, as nova's own
        claim leaves it there."""
        if not self.has_cells(cn):
            return None
        return numa.instance_topology(flavor, image_meta, (reply or {}).get("numa"))

    @_under_novas_lock
    def record_claim(self, context, instance, cn, placed):
        """nova's rows of a claim the agent made (``placed``, its reply):
        the instance on the node, with the cells and pinning the agent chose
        (the virt driver builds the guest from them, as from nova's own
        claim), and its devices allocated to it."""
        instance.numa_topology = self.placed_topology(
            cn, instance.flavor, instance.image_meta, placed
        )
        instance.host = self.host
        instance.launched_on = self.host
        instance.node = cn.hypervisor_hostname
        instance.compute_id = cn.id
        instance.save()
        nodename = cn.hypervisor_hostname
        if self._claim_pci_rows(context, instance, nodename, placed):
            self._allocate_pci_rows(context, instance, nodename)

    @_under_novas_lock
    def unrecord_claim(self, context, instance, nodename):
        self._free_pci_rows(context, instance, nodename)
        instance.clear_numa_topology()
        instance.host = None
        instance.node = None
        instance.compute_id = None
        instance.save()

    @_under_novas_lock
    def free_pci(self, context, instance, nodename):
        """The instance's rows on ``nodename`` freed (it was deleted)."""
        self._free_pci_rows(context, instance, nodename)

    # -- a move ------------------------------------------------------------

    @_under_novas_lock
    def destination(self, context, instance, new_flavor, cn, migration, *, move_type, host_ip):
        """The migration row of a move to ``cn`` (see
        :func:`migrations.destination`)."""
        return migrations.destination(
            context,
            instance,
            new_flavor,
            cn,
            migration,
            move_type=move_type,
            host=self.host,
            host_ip=host_ip,
        )

    @_under_novas_lock
    def record_move(self, context, instance, cn, migration, placed, *, new_numa, new_requests):
        """The instance's migration context of a move to ``cn``, and the
        rows of the devices the agent chose there (``placed``)."""
        nodename = cn.hypervisor_hostname
        # A live migration's devices are claimed when ComputeManager asks
        # (claim_pci_devices), as nova's tracker does.
        new_devices = (
            []
            if migration.is_live_migration
            else self._claim_pci_rows(context, instance, nodename, placed)
        )
        instance.migration_context = migrations.migration_context(
            context,
            instance,
            migration,
            new_numa,
            new_requests=new_requests,
            new_devices=new_devices,
        )
        instance.save()
        if new_devices:
            # Allocated at once, as nova's tracker does when it starts to
            # count an incoming move (after the context took the old ones).
            self._allocate_pci_rows(context, instance, nodename)

    @_under_novas_lock
    def confirm(self, context, instance, migration):
        """A move confirmed, at its source: the rows say so."""
        migration.status = "confirmed"
        migration.save()
        if migration.source_node in self.compute_nodes:
            self._free_moved_rows(context, instance, migration.source_node, "old_")
        instance.drop_migration_context()

    @_under_novas_lock
    def revert(self, context, instance, migration):
        """A move reverted, at its destination: the rows say so."""
        migration.status = "reverted"
        migration.save()
        if migration.dest_node in self.compute_nodes:
            self._free_moved_rows(context, instance, migration.dest_node, "new_")
        instance.revert_migration_context()
        instance.save(expected_task_state=[task_states.RESIZE_REVERTING])

    @_under_novas_lock
    def free_moved_pci(self, context, instance, nodename, prefix):
        """The rows of the move's ``old_`` or ``new_`` devices freed."""
        self._free_moved_rows(context, instance, nodename, prefix)

    @_under_novas_lock
    def evacuated(self, instance, node, cn, migration):
        """An evacuation landed on ``node``: the instance is there, its
        migration done."""
        instance.apply_migration_context()
        instance.host = self.host
        instance.node = node
        instance.compute_id = cn.id if cn is not None else None
        instance.save()
        instance.drop_migration_context()
        if migration:
            migration.status = "done"
            migration.save()

    # -- PCI devices outside a claim ---------------------------------------

    @_under_novas_lock
    def claim_pci(self, context, instance, nodename, chosen):
        """nova's rows of the devices ``chosen`` (the agent's choice)
        claimed for ``instance``; :returns: those rows."""
        return self._claim_pci_rows(context, instance, nodename, {"pci_devices": chosen})

    @_under_novas_lock
    def free_device(self, context, pci_device, instance):
        for rows in self._pci_rows.values():
            rows.free_devices([pci_device], instance)
            rows.save(context)

    @_under_novas_lock
    def allocate_pci_devices_for_instance(self, context, instance):
        for rows in self._pci_rows.values():
            rows.allocate(instance)
            rows.save(context)

    @_under_novas_lock
    def free_pci_device_allocations_for_instance(self, context, instance):
        for rows in self._pci_rows.values():
            rows.free_allocations(context, instance)
            rows.save(context)

    @_under_novas_lock
    def free_pci_device_claims_for_instance(self, context, instance):
        for rows in self._pci_rows.values():
            rows.free_claims(context, instance)
            rows.save(context)

    # -- inside the lock -----------------------------------------------------

    def _claim_pci_rows(self, context, instance, nodename, placed):
        """nova's rows of the devices the agent chose (``placed``'s
        ``pci_devices``), claimed; :returns: those rows."""
        rows = self._pci_rows.get(nodename)
        chosen = (placed or {}).get("pci_devices")
        if rows is None or not chosen:
            return []
        claimed = rows.claim(instance.uuid, chosen)
        rows.save(context)
        return claimed

    def _allocate_pci_rows(self, context, instance, nodename):
        rows = self._pci_rows.get(nodename)
        if rows is not None:
            rows.allocate(instance)
            rows.save(context)

    def _free_moved_rows(self, context, instance, nodename, prefix):
        rows = self._pci_rows.get(nodename)
        mc = instance.migration_context  # loaded if not yet: it may be None
        if rows is None or mc is None:
            return
        rows.free_devices(getattr(mc, f"{prefix}pci_devices", None), instance)
        rows.save(context)

    def _free_pci_rows(self, context, instance, nodename):
        rows = self._pci_rows.get(nodename)
        if rows is not None:
            rows.free(context, instance)
            rows.save(context)
