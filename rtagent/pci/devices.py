# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The PCI devices a node tracks, their states and owners. Pure values and
functions: every operation returns a new :class:`DeviceTable` and a refused
one raises before building anything, so the table it was given stays valid.

nova's states (``nova/objects/pci_device.py``): a device is *available*,
*claimed* or *allocated* by an instance, or not usable because of a
relative: a PF whose VF is held, or a VF whose PF is held, is *unclaimable*
while the relative is only claimed and *unavailable* once it is allocated.
nova sets those two by hand at every transition; here they are recomputed
from the held devices after each one (:func:`_settle`), so they cannot drift
from the holds they stand for. A PF is available again only when none of
its VFs is held.

A device the host no longer reports is dropped if it is free. One still
held is kept, with its status and owner, and marked ``gone`` (nova's
``to_be_removed_when_freed``); freeing it drops it.
"""

import dataclasses
import types

from rtagent.pci import errors, model

AVAILABLE = "available"
CLAIMED = "claimed"
ALLOCATED = "allocated"
UNCLAIMABLE = "unclaimable"
UNAVAILABLE = "unavailable"
# nova's status of a row about to be deleted; a table never holds one (a
# free device that disappears is dropped at once), the name is kept so
# callers can speak nova's vocabulary.
REMOVED = "removed"
STATUSES = (AVAILABLE, CLAIMED, ALLOCATED, UNCLAIMABLE, UNAVAILABLE)
HELD = (CLAIMED, ALLOCATED)
NOT_HERE = "no such device on this host"


def _frozen(value):
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class Device:
    """One tracked device.

    :param host: the :class:`~rtagent.pci.model.HostDevice` discovery reported.
    :param tags: the tags of the device spec it matched (physical_network,
        resource_class, traits, trusted, ...), copied into a read-only mapping.
    :param status: one of :data:`STATUSES`.
    :param instance_uuid: the owner of a claimed or allocated device, else None.
    :param request_id: the PCI request the owner took it for, or None.
    :param gone: the host no longer reports it but an instance still holds it.
    """

    host: model.HostDevice
    tags: types.MappingProxyType = dataclasses.field(default_factory=dict, hash=False)
    status: str = AVAILABLE
    instance_uuid: str | None = None
    request_id: str | None = None
    gone: bool = False

    def __post_init__(self):
        tags = types.MappingProxyType({k: _frozen(v) for k, v in dict(self.tags).items()})
        object.__setattr__(self, "tags", tags)
        if self.status not in STATUSES:
            raise ValueError(f"PCI device {self.address}: unknown status {self.status!r}")
        # A store that does not keep these together is corrupt: fail loudly.
        if self.held != bool(self.instance_uuid):
            raise ValueError(
                f"PCI device {self.address}: {self.status} with owner {self.instance_uuid!r}"
            )
        if not self.held and (self.request_id is not None or self.gone):
            raise ValueError(f"PCI device {self.address}: {self.status} with a request or gone")

    @property
    def address(self):
        return self.host.address

    @property
    def held(self):
        return self.status in HELD


@dataclasses.dataclass(frozen=True)
class DeviceTable:
    """The devices of one node, by address (iteration in address order).
    Build with :func:`make_table`; change with the module's functions."""

    devices: types.MappingProxyType

    def __iter__(self):
        return iter(self.devices.values())

    def __len__(self):
        return len(self.devices)

    def __contains__(self, address):
        return address in self.devices

    def get(self, address):
        return self.devices.get(address)


def make_table(devices=()):
    """A table of :class:`Device` values (e.g. restored from the store);
    the statuses a PF/VF relation implies are recomputed.

    :raises ValueError: two devices share an address.
    """
    by_address = {}
    for dev in devices:
        if dev.address in by_address:
            raise ValueError(f"PCI device {dev.address} listed twice")
        by_address[dev.address] = dev
    return _table(by_address)


def claim(table, addresses, instance_uuid, request_id=None):
    """Claim the available devices at ``addresses`` for an instance.

    :raises errors.InvalidRequest: no instance uuid.
    :raises errors.InvalidTransition: an address is unknown or not available
        (held, or blocked by a held PF/VF, including one claimed earlier in
        the same call).
    """
    if not instance_uuid:
        raise errors.InvalidRequest(reason="a PCI claim needs an instance uuid")
    devs = dict(table.devices)
    for address in addresses:
        dev = devs.get(address)
        if dev is None:
            raise errors.InvalidTransition(address=address, reason=NOT_HERE)
        if dev.status != AVAILABLE:
            raise errors.InvalidTransition(address=address, reason=_why_busy(devs, dev))
        devs[address] = dataclasses.replace(
            dev, status=CLAIMED, instance_uuid=instance_uuid, request_id=request_id
        )
        # Settle now so the next address sees this claim's PF/VF effect.
        devs = _settle(devs)
    return _table(devs)


def allocate(table, instance_uuid):
    """Every device the instance has claimed becomes allocated (nova's
    ``allocate_instance``); an instance with no claim leaves the table as is."""
    targets = [d for d in table if d.instance_uuid == instance_uuid and d.status == CLAIMED]
    if not targets:
        return table
    devs = dict(table.devices)
    for dev in targets:
        devs[dev.address] = dataclasses.replace(dev, status=ALLOCATED)
    return _table(devs)


def free(table, instance_uuid, addresses=None, status=None):
    """Give an instance's devices back: all it holds, or only ``addresses``,
    or only those in ``status`` (CLAIMED: nova's ``free_instance_claims``,
    ALLOCATED: ``free_instance_allocations``). Freed devices become
    available, gone ones are dropped.

    :raises errors.InvalidRequest: ``status`` is neither claimed nor allocated.
    :raises errors.InvalidTransition: an address given is unknown or not
        held by this instance (in ``status``, when given).
    """
    if status not in (None, *HELD):
        raise errors.InvalidRequest(reason=f"cannot free devices in status {status!r}")
    wanted = HELD if status is None else (status,)
    if addresses is None:
        targets = [d for d in table if d.instance_uuid == instance_uuid and d.status in wanted]
    else:
        targets = []
        for address in addresses:
            dev = table.get(address)
            if dev is None:
                raise errors.InvalidTransition(
                    address=address, reason="no such device on this host"
                )
            if dev.instance_uuid != instance_uuid or dev.status not in wanted:
                reason = f"is {_describe(dev)}, not {'/'.join(wanted)} by {instance_uuid}"
                raise errors.InvalidTransition(address=address, reason=reason)
            targets.append(dev)
    if not targets:
        return table
    devs = dict(table.devices)
    for dev in targets:
        if dev.gone:
            del devs[dev.address]
        else:
            devs[dev.address] = dataclasses.replace(
                dev, status=AVAILABLE, instance_uuid=None, request_id=None
            )
    return _table(devs)


def refresh(table, discovered):
    """Apply a discovery: ``discovered`` is every ``(HostDevice, tags)`` the
    host has now that matches a device spec.

    New devices come in available; a device that disappeared is dropped if
    free and kept, marked gone, if held; a device that is back is no longer
    gone. A device's facts and tags are replaced in place, its owner kept
    (nova defers that until the device is freed; here the PF/VF statuses
    are recomputed from the new facts, so they cannot go stale).

    :raises ValueError: an address is discovered twice.
    """
    seen = {}
    for host, tags in discovered:
        if host.address in seen:
            raise ValueError(f"PCI device {host.address} discovered twice")
        seen[host.address] = (host, tags)
    devs = {}
    for address, dev in table.devices.items():
        if address in seen:
            host, tags = seen[address]
            devs[address] = dataclasses.replace(dev, host=host, tags=tags, gone=False)
        elif dev.held:
            devs[address] = dataclasses.replace(dev, gone=True)
    for address, (host, tags) in seen.items():
        if address not in table.devices:
            devs[address] = Device(host=host, tags=tags)
    return _table(devs)


def of_instance(table, instance_uuid):
    """The devices an instance holds, in address order."""
    return tuple(d for d in table if d.instance_uuid == instance_uuid)


def held_but_gone(table):
    """Devices the host no longer reports that an instance still holds:
    the operator has to delete or move those instances."""
    return tuple(d for d in table if d.gone)


def available(table):
    """The devices a request may take, in address order."""
    return tuple(d for d in table if d.status == AVAILABLE)


def parent_of(devs, dev):
    """A VF's PF when the table tracks it, else None. ``devs``: address -> Device."""
    if dev.host.dev_type not in model.CHILD_TYPES or dev.host.parent_addr is None:
        return None
    parent = devs.get(dev.host.parent_addr)
    return parent if parent is not None and parent.host.dev_type == model.TYPE_PF else None


def children_of(devs):
    """PF address -> the addresses of its tracked VFs. ``devs``: address -> Device."""
    children = {}
    for dev in devs.values():
        parent = parent_of(devs, dev)
        if parent is not None:
            children.setdefault(parent.address, []).append(dev.address)
    return children


def _table(devs):
    settled = _settle(devs)
    return DeviceTable(types.MappingProxyType(dict(sorted(settled.items()))))


def _settle(devs):
    """Recompute the status of every device nobody holds from its relatives:
    a held relative makes it unavailable (allocated) or unclaimable (claimed)."""
    children = children_of(devs)
    out = {}
    for address, dev in devs.items():
        status = dev.status if dev.held else _status_from_relatives(devs, children, dev)
        out[address] = dev if status == dev.status else dataclasses.replace(dev, status=status)
    return out


def _status_from_relatives(devs, children, dev):
    holds = {devs[a].status for a in children.get(dev.address, ())}
    parent = parent_of(devs, dev)
    if parent is not None:
        holds.add(parent.status)
    if ALLOCATED in holds:
        return UNAVAILABLE
    return UNCLAIMABLE if CLAIMED in holds else AVAILABLE


def _describe(dev):
    return f"{dev.status} by {dev.instance_uuid}" if dev.held else dev.status


def _why_busy(devs, dev):
    if dev.held:
        return f"is {_describe(dev)}"
    parent = parent_of(devs, dev)
    if parent is not None and parent.held:
        return f"is {dev.status}: its PF {parent.address} is {_describe(parent)}"
    held = [devs[a].address for a in children_of(devs).get(dev.address, ()) if devs[a].held]
    return f"is {dev.status}: its VFs {', '.join(held)} are held"
