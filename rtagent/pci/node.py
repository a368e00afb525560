# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A node's PCI devices from one host reading: which devices it tracks, and
which of them a domain holds without a claim. Pure functions; the tracker
calls them under its lock, so nothing here reads the host.

The node's :class:`~rtagent.pci.devices.DeviceTable` is a function of the
reading, the ``[pci] device_spec`` values and (once PCI claims exist) the
claims: it is rebuilt from them, never patched, so a device that a domain
gave back, or a spec that changed across a restart, leaves nothing stale.
"""

import dataclasses

from rtagent.pci import devices, spec

_EMPTY = devices.make_table()


@dataclasses.dataclass(frozen=True)
class HeldWithoutClaim:
    """A tracked device that a domain on the host holds while no claim
    accounts for it (a guest started by hand, claims lost with a state
    directory, a device attached behind the agent's back).

    :param address: the device's PCI address.
    :param owner: the UUID of the domain holding it.
    :param domain_name: that domain's libvirt name.
    """

    address: str
    owner: str
    domain_name: str


def tracked(host_devices, specs):
    """``(HostDevice, tags)`` for each of ``host_devices`` that a spec
    matches (the first that does, as nova), in the order given. A VF is
    matched with its PF, when the host reports it, so that a spec naming
    the PF's ``devname`` takes the VF."""
    if not specs:
        return ()
    by_address = {d.address: d for d in host_devices}
    found = []
    for dev in host_devices:
        parent = by_address.get(dev.parent_addr) if dev.parent_addr else None
        matched = spec.match(specs, dev, parent)
        if matched is not None:
            found.append((dev, matched.tags))
    return tuple(found)


def held_without_claim(table, domains, claimed=frozenset()):
    """The devices of ``table`` that ``domains`` (``DomainInfo`` values)
    hold and whose addresses are not in ``claimed``, sorted by address then
    domain UUID. A shut-off domain counts: starting it takes its devices
    back. Mediated devices and devices the table does not track are left out.
    """
    found = [
        HeldWithoutClaim(address, dom.uuid, dom.name)
        for dom in domains
        for address in dom.host_devices
        if address in table and address not in claimed
    ]
    return tuple(sorted(found, key=lambda h: (h.address, h.owner)))


def mark_held(table, held):
    """``table`` with each device in ``held`` (:class:`HeldWithoutClaim`)
    allocated to the domain holding it (the first by UUID when several
    name it).

    Why allocated, by the domain's UUID: the device state machine then
    keeps it, and the relatives it blocks (its PF, or its VFs: nova's
    *unavailable*), out of the free devices, so neither pools nor a later
    selection offer what a running guest uses, and no second notion of
    "busy" is needed. *Allocated* rather than *claimed*: the domain has the
    device, it is not on its way to it. The mark is not a claim: the table
    is rebuilt on every reading, so it goes when the domain lets go.
    """
    owners = {}
    for h in held:
        owners.setdefault(h.address, h.owner)
    if not owners:
        return table
    return devices.make_table(
        dataclasses.replace(dev, status=devices.ALLOCATED, instance_uuid=owners[dev.address])
        if dev.address in owners and not dev.held
        else dev
        for dev in table
    )


def node_devices(host, specs):
    """The node's table for one reading (a ``HostView``) and what is held
    in it without a claim.

    :param specs: the :class:`~rtagent.pci.spec.DeviceSpec` values.
    :returns: (DeviceTable, tuple of :class:`HeldWithoutClaim`).
    """
    # No PCI claims yet: every device a domain holds is held without one.
    table = devices.refresh(_EMPTY, tracked(host.pci_devices, specs))
    if not len(table):
        return table, ()  # nothing tracked: no pass over the domains
    held = held_without_claim(table, host.domains)
    return mark_held(table, held), held
