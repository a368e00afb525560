# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A node's PCI devices from one host reading: which devices it tracks, and
which of them a domain holds without a claim. Pure functions; the tracker
calls them under its lock, so nothing here reads the host.

The node's :class:`~rtagent.pci.devices.DeviceTable` is a function of the
reading, the ``[pci] device_spec`` values and the claims' holds
(:class:`~rtagent.pci.held.HeldDevice`): it is rebuilt from them, never
patched, so a device that a domain gave back, a claim that ended, or a spec
that changed across a restart, leaves nothing stale.
"""

import dataclasses
import types

from rtagent.pci import devices, spec

_EMPTY = devices.make_table()
_NO_CLAIMS = types.MappingProxyType({})


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


def held_without_claim(table, domains, claimed=_NO_CLAIMS):
    """The devices of ``table`` that ``domains`` (``DomainInfo`` values)
    hold without a claim of theirs: ``claimed`` maps a claimed address to
    the instance (the domain's UUID) whose claim holds it. Sorted by address
    then domain UUID. A shut-off domain counts: starting it takes its
    devices back. Mediated devices and devices the table does not track are
    left out.
    """
    found = [
        HeldWithoutClaim(address, dom.uuid, dom.name)
        for dom in domains
        for address in dom.host_devices
        if address in table and claimed.get(address) != dom.uuid
    ]
    return tuple(sorted(found, key=lambda h: (h.address, h.owner)))


def with_holds(table, holds):
    """``table`` with each hold applied: ``holds`` are ``(owner, HeldDevice,
    status)`` with status claimed or allocated.

    A held device the table lacks (the host no longer reports it, or no
    spec matches it any more) is added from the hold's facts, marked
    ``gone``: it stays held, and reported, until its claim ends. A device
    two holds name (only a damaged store can say so) stays with the first.
    """
    if not holds:
        return table
    devs = dict(table.devices)
    for owner, held, status in holds:
        dev = devs.get(held.address)
        if dev is not None and dev.held:
            continue
        devs[held.address] = devices.Device(
            host=dev.host if dev is not None else held.host_device(),
            tags=dev.tags if dev is not None else {},
            status=status,
            instance_uuid=owner,
            request_id=held.request_id,
            gone=dev is None,
        )
    return devices.make_table(devs.values())


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


@dataclasses.dataclass(frozen=True)
class Discovered:
    """What one reading gives before any claim: the devices the specs match
    (all available), and every (tracked device, domain naming it) pair as
    :class:`HeldWithoutClaim` values, sorted. Kept by the tracker between
    readings, so that a claim rebuilds the table from the claims' holds
    without matching specs or walking the domains again."""

    table: devices.DeviceTable = _EMPTY
    named: tuple = ()


def discover(host, specs):
    """:class:`Discovered` of one reading (a ``HostView``).

    :param specs: the :class:`~rtagent.pci.spec.DeviceSpec` values.
    """
    table = devices.refresh(_EMPTY, tracked(host.pci_devices, specs))
    if not len(table):
        return Discovered(table)  # nothing tracked: no pass over the domains
    return Discovered(table, held_without_claim(table, host.domains))


def with_claims(found, holds=()):
    """The node's table: ``found`` (a :class:`Discovered`) with the claims'
    holds applied (see :func:`with_holds`) and the devices domains hold
    without a claim of theirs marked (see :func:`mark_held`).

    :returns: (DeviceTable, tuple of :class:`HeldWithoutClaim`).
    """
    table = with_holds(found.table, holds)
    if not found.named:
        return table, ()
    claimed = {d.address: d.instance_uuid for d in table if d.held}
    held = tuple(h for h in found.named if claimed.get(h.address) != h.owner)
    return mark_held(table, held), held


def node_devices(host, specs, holds=()):
    """The node's table for one reading (a ``HostView``) and the claims'
    holds, and what is held in it without a claim: :func:`with_claims` of
    :func:`discover`.

    :returns: (DeviceTable, tuple of :class:`HeldWithoutClaim`).
    """
    return with_claims(discover(host, specs), holds)
