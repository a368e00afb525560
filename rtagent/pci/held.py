# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The PCI devices a claim holds: a durable value per device, and the
choice of devices for a claim's requests. Pure.

A claim keeps, per device, its address, the request it was taken for and
the facts discovery gave of it (ids, type, NUMA node, PF). The facts are
kept because a device the host stops reporting stays held until its claim
ends: the node's table must still show it, and the caller still needs its
ids, with no reading of the host to take them from.
"""

import dataclasses

from rtagent.pci import address, model, pools


@dataclasses.dataclass(frozen=True)
class HeldDevice:
    """One device held by a claim (an instance's, or a move's side).

    :param address: the device's PCI address.
    :param request_id: the id of the request it was taken for.
    :param vendor_id, product_id, dev_type, numa_node, parent_addr: the
        device's facts when it was taken (see
        :class:`~rtagent.pci.model.HostDevice`).
    """

    address: str
    request_id: str
    vendor_id: str
    product_id: str
    dev_type: str = model.TYPE_PCI
    numa_node: int | None = None
    parent_addr: str | None = None

    @classmethod
    def of(cls, device, request_id):
        """The hold of ``device`` (a :class:`~rtagent.pci.devices.Device`)."""
        host = device.host
        return cls(
            host.address,
            request_id,
            host.vendor_id,
            host.product_id,
            host.dev_type,
            host.numa_node,
            host.parent_addr,
        )

    def host_device(self):
        """The device as discovery last reported it (for a device the host
        no longer reports)."""
        return model.HostDevice(
            self.address,
            self.vendor_id,
            self.product_id,
            self.dev_type,
            self.numa_node,
            self.parent_addr,
        )

    def describe(self):
        """What replies show of it, so that a caller can attach it."""
        return {
            "address": self.address,
            "dev_type": self.dev_type,
            "vendor_id": self.vendor_id,
            "product_id": self.product_id,
            "numa_node": self.numa_node,
            "request_id": self.request_id,
        }

    def to_dict(self):
        # Strings and numbers only: no deep copy (dataclasses.asdict's).
        return {name: getattr(self, name) for name in _HELD_FIELDS}

    @classmethod
    def from_dict(cls, data):
        """The hold a stored row describes, its addresses in their one form
        (a row edited to ``0000:AF:00.0`` names the device ``0000:af:00.0``
        is, not a device the host lacks).

        :raises rtagent.pci.errors.InvalidRequest: an address is not one (the row
            check, :mod:`rtagent.tracker.rows`, refuses such a row first).
        """
        data = dict(data, address=address.canonical(data["address"], field="address"))
        if data.get("parent_addr") is not None:
            data["parent_addr"] = address.canonical(data["parent_addr"], field="parent_addr")
        return cls(**data)


_HELD_FIELDS = tuple(f.name for f in dataclasses.fields(HeldDevice))


def choose(table, requests, instance_cells=None, cell_sockets=None, node_uuid=None, *, held=None):
    """The devices of ``table`` that meet ``requests`` (see
    :func:`rtagent.pci.pools.select`), as holds in request order, then
    address order.

    :param instance_cells: the host cells the guest's NUMA cells are on, or
        None for a guest without NUMA topology (no NUMA filtering).
    :param cell_sockets: host cell id -> socket id (the socket policy).
    :param node_uuid: the node's UUID, for a spec's ``rp_uuids``.
    :param held: {request id: addresses} the guest already runs with,
        which those requests take (see :func:`rtagent.pci.pools.select`).
    :raises errors.DevicesUnavailable: a request cannot be met.
    """
    if not requests:
        return ()
    chosen = pools.select(table, requests, instance_cells, cell_sockets, node_uuid, held=held)
    return tuple(
        HeldDevice.of(table.get(address), request.request_id)
        for request in requests
        for address in chosen[request.request_id]
    )


def counts(held):
    """request id -> how many devices ``held`` takes for it: what a retried
    claim must ask again to be the same claim."""
    found = {}
    for h in held:
        found[h.request_id] = found.get(h.request_id, 0) + 1
    return found


def requested_counts(requests):
    """request id -> count, of :class:`~rtagent.pci.pools.PciRequest` values."""
    return {r.request_id: r.count for r in requests}
