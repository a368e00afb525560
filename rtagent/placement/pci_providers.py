# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""PCI devices as Placement providers (``[pci] report_in_placement``). Pure.

nova's model, which its scheduler reads: one child provider of the compute
node per PF or standalone PCI device, named ``<hypervisor_hostname>_<ADDRESS>``;
the VFs of a PF are counted together on their PF's provider (the PF itself
is then not reported); the resource class is the spec's ``resource_class``
or ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``; the traits are the spec's plus
COMPUTE_MANAGED_PCI_DEVICE and OWNER_NOVA (HW_PCI_LIVE_MIGRATABLE and
HW_PCI_ONE_TIME_USE where the spec says so). Devices with a
``physical_network`` are neutron's SR-IOV ports and stay off Placement.

A provider's UUID is derived from the node's UUID and the address, so a
restart, or reporting turned off and on again, finds the same provider.

A one-time-use device's provider is reserved in full once a claim holds
it, and stays reserved after the free (``sticky_reserved``) until an
operator sets ``reserved`` back to 0 once the device is clean, as in nova.

What differs from nova: a device that a domain holds with no claim (PCI
drift) is ``reserved`` on its provider, as untracked guests' resources are on
the root, so the scheduler never hands it out either.
"""

import dataclasses
import types

import os_traits

from rtagent.pci import errors, model, pools, spec
from rtagent.placement.tree import Provider
from rtagent.resources import Inventory, frozen_map

# Every trait this module may put on a device provider: one it stops
# putting (a tag removed from the spec) is removed. A custom trait removed
# from the spec stays until the provider is recreated.
_OWN_TRAITS = frozenset(
    {
        os_traits.COMPUTE_MANAGED_PCI_DEVICE,
        os_traits.OWNER_NOVA,
        os_traits.HW_PCI_LIVE_MIGRATABLE,
        os_traits.HW_PCI_ONE_TIME_USE,
    }
)


@dataclasses.dataclass(frozen=True)
class Layout:
    """The node's PCI providers and where each device is counted.

    :param providers: the child :class:`~rtagent.placement.tree.Provider`
        values, in address order.
    :param slots: device address -> (provider UUID, resource class), for
        every device reported.
    """

    providers: tuple = ()
    slots: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))

    def allocations(self, held):
        """{provider: {class: amount}} of the devices ``held`` (a claim's
        :class:`~rtagent.pci.held.HeldDevice` values, or addresses); a
        device that is not reported counts nowhere."""
        found = {}
        for device in held:
            slot = self.slots.get(getattr(device, "address", device))
            if slot is not None:
                classes = found.setdefault(slot[0], {})
                classes[slot[1]] = classes.get(slot[1], 0) + 1
        return found


NO_LAYOUT = Layout()


provider_uuid = pools.provider_uuid


def provider_name(hypervisor_hostname, address):
    """nova's name of the provider of ``address``."""
    return f"{hypervisor_hostname}_{address.upper()}"


def layout(table, node_uuid, hypervisor_hostname, drift=()):
    """The providers of the devices of ``table`` (a
    :class:`~rtagent.pci.devices.DeviceTable`).

    :param drift: addresses held by domains without a claim (reserved).
    :raises errors.PlacementLayoutInvalid: a PF is tracked with its VFs, or
        one PF's VFs disagree on resource class or traits.
    """
    groups = {}
    for device in table:
        if device.tags.get("physical_network"):
            continue
        host = device.host
        home = host.parent_addr if host.dev_type in model.CHILD_TYPES else host.address
        if home is None:
            raise errors.PlacementLayoutInvalid(address=host.address, reason="a VF without a PF")
        groups.setdefault(home, []).append(device)
    drift = frozenset(drift)
    providers, slots = [], {}
    for home, devices in sorted(groups.items()):
        rc, traits = _describe(home, devices)
        rp = provider_uuid(node_uuid, home)
        total = len(devices)
        held = sum(1 for d in devices if d.held and d.address not in drift)
        reserved = sum(1 for d in devices if d.address in drift)
        one_time = any(d.tags.get("one_time_use") for d in devices)
        if held and one_time:
            reserved = total
        providers.append(
            Provider(
                uuid=rp,
                name=provider_name(hypervisor_hostname, home),
                parent_uuid=node_uuid,
                inventories=frozen_map(
                    {rc: Inventory(total=total, reserved=reserved, max_unit=total)}
                ),
                traits=traits,
                managed_traits=traits | _OWN_TRAITS,
                managed_classes=frozenset({rc}),
                # A spec whose resource class or traits changed leaves
                # nothing of the old ones.
                owned=True,
                sticky_reserved=frozenset({rc}) if one_time else frozenset(),
            )
        )
        slots.update({d.address: (rp, rc) for d in devices})
    return Layout(tuple(providers), frozen_map(slots))


def _describe(home, devices):
    """(resource class, traits) of the provider at ``home``."""
    parents = [d for d in devices if d.host.dev_type not in model.CHILD_TYPES]
    if parents and len(devices) > 1:
        raise errors.PlacementLayoutInvalid(
            address=home,
            reason="the PF and its VFs are both tracked; nova reports one or the other "
            "(narrow [pci] device_spec to the PF or to its VFs)",
        )
    classes = {spec.resource_class_of(d.host, d.tags) for d in devices}
    traits = {spec.traits_of(d.host, d.tags) | {os_traits.OWNER_NOVA} for d in devices}
    if len(classes) > 1:
        raise errors.PlacementLayoutInvalid(
            address=home, reason=f"its VFs have different resource classes {sorted(classes)}"
        )
    if len(traits) > 1:
        raise errors.PlacementLayoutInvalid(address=home, reason="its VFs have different traits")
    return classes.pop(), traits.pop()


@dataclasses.dataclass(frozen=True)
class Report:
    """What a node's sync does with its PCI devices.

    :param layout: the :class:`Layout` reported (empty when reporting is off).
    :param held: {consumer: {provider: {class: amount}}}: what the node's
        claims hold on those providers, by its own accounting (a provider
        that appears gives them their allocations in the same reshape).
    :param drop: providers of the node's devices that may exist from an
        earlier run with reporting on: when the tree no longer has them,
        their allocations are removed and they are deleted.
    """

    layout: Layout = NO_LAYOUT
    held: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    drop: frozenset = frozenset()


def report(snapshot, enabled):
    """The :class:`Report` of ``snapshot`` (a tracker NodeSnapshot).

    :param enabled: ``[pci] report_in_placement``.
    :raises errors.PlacementLayoutInvalid: see :func:`layout` (only when
        enabled).
    """
    table = snapshot.pci_devices
    if not enabled:
        homes = {d.host.parent_addr or d.address for d in table}
        return Report(drop=frozenset(provider_uuid(snapshot.node_uuid, a) for a in homes))
    drift = frozenset(h.address for h in snapshot.pci_held)
    found = layout(table, snapshot.node_uuid, snapshot.hypervisor_hostname, drift)
    owned = {}
    for device in table:
        if device.held and device.address not in drift:
            owned.setdefault(device.instance_uuid, []).append(device.address)
    held = {owner: found.allocations(addresses) for owner, addresses in owned.items()}
    return Report(layout=found, held=frozen_map({c: a for c, a in held.items() if a}))
