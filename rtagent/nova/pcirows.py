# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova's PciDevice rows of one node, kept to what the agent decided.

The agent chooses the devices of a claim (RPC ``pci_requests``); nova's
other parts still read nova's rows: the API and its tests count
``PciDevice`` rows by status, and the libvirt driver attaches what
``instance.pci_devices`` lists. This keeps those rows with nova's own
``PciDevTracker`` (its state machine: claimed, allocated, and the PF/VF
dependants made unavailable or unclaimable), but never lets it choose:
:meth:`NovaPciRows.claim` takes exactly the addresses the agent's reply
names. The scheduler reads the agent's pools, not this tracker's
(:func:`rtagent.nova.computenode.apply_view`).
"""

import logging

from nova.objects import fields
from nova.pci import manager as pci_manager

LOG = logging.getLogger(__name__)


class NovaPciRows:
    """The PciDevice rows of ``compute_node``, through nova's tracker."""

    def __init__(self, context, compute_node):
        self._tracker = pci_manager.PciDevTracker(context, compute_node)

    @property
    def tracker(self):
        """nova's ``PciDevTracker`` (ComputeManager reads
        ``rt.pci_tracker`` for an SR-IOV port's device)."""
        return self._tracker

    @property
    def empty(self):
        """No row on the node: nothing to allocate, free or clean."""
        return not self._tracker.pci_devs

    def update_devices(self, resources):
        """New and removed rows for the driver's ``pci_passthrough_devices``
        (nova filters them with the same ``[pci] device_spec`` the agent
        has)."""
        devices_json = resources.get("pci_passthrough_devices")
        if devices_json is not None:
            self._tracker.update_devices_from_hypervisor_resources(devices_json)

    def claim(self, instance_uuid, chosen):
        """Mark the rows of ``chosen`` (the agent's ``pci_devices``: dicts
        with ``address`` and ``request_id``) claimed by the instance.

        :returns: the claimed ``PciDevice`` objects (a move's
            ``new_pci_devices``); a row the agent chose that nova does not
            have, or has in another state, is logged and left out.
        """
        tracker = self._tracker
        by_address = {dev.address: dev for dev in tracker.pci_devs}
        claimed = []
        for choice in chosen or ():
            dev = by_address.get(choice.get("address"))
            if dev is None or dev.status != fields.PciDeviceStatus.AVAILABLE:
                if dev is None or dev.instance_uuid != instance_uuid:
                    LOG.warning(
                        "The agent gave PCI device %s to instance %s but nova's row is %s",
                        choice.get("address"),
                        instance_uuid,
                        "missing" if dev is None else dev.status,
                    )
                continue
            self._out_of_pools(dev)
            dev.claim(instance_uuid)
            dev.request_id = choice.get("request_id")
            claimed.append(dev)
        if claimed:
            tracker.claims[instance_uuid] = tracker.claims.get(instance_uuid, []) + claimed
        return claimed

    def _out_of_pools(self, dev):
        """Take ``dev`` and what claiming it makes unusable out of nova's
        pools (so that a later free puts them back once)."""
        stats = self._tracker.stats
        free = stats.get_free_devs()
        dependants = [dev]
        if dev.dev_type == fields.PciDeviceType.SRIOV_PF:
            dependants += list(getattr(dev, "child_devices", None) or ())
        elif dev.dev_type in (fields.PciDeviceType.SRIOV_VF, fields.PciDeviceType.VDPA):
            parent = getattr(dev, "parent_device", None)
            if parent is not None:
                dependants.append(parent)
        for each in dependants:
            if each in free:
                stats.remove_device(each)
                free.remove(each)

    def allocate(self, instance):
        """The instance's claimed rows become allocated to it (it is on the
        node: built, or its move landed)."""
        self._tracker.allocate_instance(instance)

    def free(self, context, instance):
        """Every row the instance holds on the node is free again."""
        self._tracker.free_instance(context, instance)

    def free_allocations(self, context, instance):
        """The instance's allocated rows are free (it left the node)."""
        self._tracker.free_instance_allocations(context, instance)

    def free_claims(self, context, instance):
        """The instance's claimed rows are free (its arrival was undone)."""
        self._tracker.free_instance_claims(context, instance)

    def free_devices(self, devices, instance):
        """The rows of ``devices`` (a move's old or new ones) are free."""
        for dev in devices or ():
            self._tracker.free_device(dev, instance)

    def clean(self, instances, migrations):
        """Free the rows of instances that neither ``instances`` nor
        ``migrations`` name (nova's ``clean_usage``)."""
        self._tracker.clean_usage(instances, migrations)

    def save(self, context):
        self._tracker.save(context)
