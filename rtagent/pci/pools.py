# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Free devices grouped as nova's pools, and the choice of devices for an
instance's PCI requests. Pure functions over a
:class:`~rtagent.pci.devices.DeviceTable`.

nova's rules (``nova/pci/stats.py``):

- A pool is the free devices with equal vendor_id, product_id, numa_node,
  dev_type, spec tags and address, where a VF's address is its PF's: every
  PCI device and PF is its own pool, the VFs of one PF share one. The
  ``resource_class`` and ``traits`` tags are left out (Placement matches
  them); PFs and VFs get ``remote_managed='false'`` unless tagged.
- A request matches a device when any of its specs does: every key of the
  spec equals the device's (strings case-insensitively; a list must be a
  subset of the device's list). PFs are offered only to requests with a
  spec asking ``dev_type: type-PF``, remote-managed devices only to requests
  asking ``remote_managed: true``.
- NUMA (only for a guest with NUMA cells): devices on the guest's host
  cells are taken when there are enough of them, whatever the policy.
  Otherwise *required* fails; *socket* takes devices on cells of the same
  sockets; *legacy* adds devices with no NUMA node; *preferred* adds those
  too, then any device.

Done differently, each for a reason:

- The PF and remote-managed exclusions apply before NUMA counts, so a
  device a request can never take does not make a stricter tier look big
  enough (nova counts them, then drops them, and fails).
- Within what a policy allows, devices are ranked (guest cell, then no
  node, then other cells; then fewest other free devices taken along: a VF
  whose PF is already blocked before one whose PF is free, a PF with fewest
  free VFs; then the lowest PF or device address, and of one PF's VFs the
  highest, the device nova would give: it takes pools in address order and
  a pool's devices from its end). nova takes pools in insertion order
  without the ranking, so it may split VFs over PFs and leave no whole PF
  free.
- A tier is tried by really picking from it, so a PF and its VFs that
  exclude each other never make a tier look sufficient.
- *socket* without socket ids for some cells counts only the cells that
  have one (nova refuses every device then).
"""

import collections
import dataclasses
import json
import types
import uuid as uuidlib

from rtagent.pci import address as pci_address
from rtagent.pci import devices, errors, holding, model
from rtagent.pci.model import LEGACY, NUMA_POLICIES, PREFERRED, REQUIRED, SOCKET

__all__ = ["LEGACY", "NUMA_POLICIES", "PREFERRED", "REQUIRED", "SOCKET"]

# Matched by Placement, not here (nova's ignored_spec_tags/ignored_pool_tags).
_PLACEMENT_KEYS = frozenset({"resource_class", "traits", "rp_uuid", "rp_uuids"})
_KEY_FIELDS = ("vendor_id", "product_id", "numa_node", "dev_type", "address")
_TRUE = frozenset({"true", "1", "yes", "y", "on", "t"})


@dataclasses.dataclass(frozen=True)
class Pool:
    """Free devices that are alike. ``address`` is the PF's for VFs, the
    device's own otherwise; ``tags`` a sorted tuple of (name, value)."""

    vendor_id: str
    product_id: str
    numa_node: int | None
    dev_type: str
    address: str
    tags: tuple
    addresses: tuple

    @property
    def count(self):
        return len(self.addresses)


@dataclasses.dataclass(frozen=True)
class PciRequest:
    """Devices one instance asks for under one request id.

    :param specs: spec mappings; a device matching any one will do.
    :param numa_policy: one of :data:`NUMA_POLICIES`; None means legacy.
    :param alias_name: the ``[pci] alias`` the request comes from, for errors.
    :param placement_entries: the alias's entries
        (:class:`~rtagent.pci.alias.Alias`) whose ``resource_class`` and
        ``traits`` a device must also have, as Placement would check them
        (``[pci] report_in_placement``); empty: those keys are not matched.
    :raises errors.InvalidRequest: no id, no spec, a count under 1 or an
        unknown policy.
    """

    request_id: str
    count: int
    specs: tuple = dataclasses.field(hash=False)
    numa_policy: str = LEGACY
    alias_name: str | None = None
    placement_entries: tuple = dataclasses.field(default=(), hash=False)

    def __post_init__(self):
        if not self.request_id:
            raise errors.InvalidRequest(reason="a PCI request needs a request id")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise errors.InvalidRequest(reason=f"count {self.count!r} is not a positive integer")
        if not self.specs:
            raise errors.InvalidRequest(reason=f"request {self.request_id} has no spec")
        specs = tuple(types.MappingProxyType(dict(spec)) for spec in self.specs)
        object.__setattr__(self, "specs", specs)
        object.__setattr__(self, "numa_policy", self.numa_policy or LEGACY)
        if self.numa_policy not in NUMA_POLICIES:
            raise errors.InvalidRequest(reason=f"unknown NUMA policy {self.numa_policy!r}")

    @property
    def provider_counts(self):
        """{provider UUID: devices} when a spec's ``rp_uuids`` name one
        provider per device, as nova's scheduler writes them (a provider
        Placement allocated two VFs from is named twice): the devices must
        then come from those providers in exactly those numbers, or the
        device allocations in Placement would not match the claim. None
        when no spec names providers, or the names do not add up to the
        count (they then only admit the devices of those providers)."""
        for spec in self.specs:
            named = spec.get("rp_uuids")
            if named:
                return dict(collections.Counter(named)) if len(named) == self.count else None
        return None

    def describe(self):
        if self.alias_name:
            return f"alias {self.alias_name!r}"
        return "specs " + json.dumps([dict(s) for s in self.specs], sort_keys=True, default=str)


def pools(table):
    """The table's available devices grouped into :class:`Pool` values,
    ordered by vendor, product, NUMA node (None last), type, address, tags."""
    grouped = {}
    for dev in devices.available(table):
        view = _view(dev)
        key = (*(view[k] for k in _KEY_FIELDS), _tags(view))
        grouped.setdefault(key, []).append(dev.address)
    ordered = sorted(
        grouped, key=lambda k: (k[0], k[1], k[2] is None, k[2] or 0, k[3:5], repr(k[5]))
    )
    return tuple(Pool(*key, addresses=tuple(grouped[key])) for key in ordered)


def as_nova_pools(pool_values, provider_of=None):
    """Pools as nova's ``PciDevicePool`` fields (what a compute node's
    ``pci_device_pools`` holds): vendor_id, product_id, numa_node, count,
    and every other key in ``tags`` as a string (or None).

    :param provider_of: callable(address) -> the UUID of the Placement
        provider of a PF's or device's address, with ``[pci]
        report_in_placement``: each pool reported in Placement then carries
        it as ``rp_uuid``, which nova's scheduler matches against the
        providers it allocated. None: no ``rp_uuid``.
    """
    found = []
    for p in pool_values:
        tags = {"dev_type": p.dev_type, "address": p.address}
        tags |= {name: _as_string(value) for name, value in p.tags}
        if provider_of is not None and not tags.get("physical_network"):
            tags["rp_uuid"] = provider_of(p.address)
        found.append(
            {
                "vendor_id": p.vendor_id,
                "product_id": p.product_id,
                "numa_node": p.numa_node,
                "count": p.count,
                "tags": tags,
            }
        )
    return found


def provider_uuid(node_uuid, address):
    """The UUID of the Placement provider of the device at ``address`` (a
    PF's or standalone device's) on node ``node_uuid``: the same across
    restarts, and when reporting is turned off and on again."""
    return str(uuidlib.uuid5(uuidlib.UUID(node_uuid), f"pci:{address}"))


def select(table, requests, instance_cells=None, cell_sockets=None, node_uuid=None, *, held=None):
    """Choose free devices for every request of one instance, in order.

    :param requests: :class:`PciRequest` values, distinct ids.
    :param instance_cells: host cell ids the guest's NUMA cells are on;
        None (or empty) for a guest without NUMA topology.
    :param cell_sockets: host cell id -> socket id, for the socket policy.
    :param node_uuid: the node's UUID: a spec's ``rp_uuids`` (the device
        providers Placement allocated) then admits only the devices of those
        providers (:func:`provider_uuid`).
    :param held: {request_id: addresses} the guest already holds (an
        instance claimed while it runs with its devices): those requests
        take exactly these devices, whatever the NUMA policy (the guest
        runs with them), or nothing is chosen.
    :returns: {request_id: sorted tuple of addresses}. No device twice,
        never a PF together with one of its VFs.
    :raises errors.InvalidRequest: two requests share an id.
    :raises errors.DevicesUnavailable: a request cannot be met; the reason
        names it and counts matching and NUMA-allowed free devices.
    """
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise errors.InvalidRequest(reason=f"request ids repeat: {ids}")
    cells = frozenset(instance_cells or ())
    free = {d.address: d for d in devices.available(table)}
    taken = _taken_along(table)
    chosen = {}
    held = held or {}
    for request in requests:
        if request.request_id in held:
            picked = _held(request, held[request.request_id], free, taken, node_uuid)
        else:
            picked = _pick_for(
                request, free, taken, cells, cell_sockets=cell_sockets or {}, node_uuid=node_uuid
            )
        for dev in picked:
            for address in taken[dev.address]:
                free.pop(address, None)
        chosen[request.request_id] = tuple(sorted(d.address for d in picked))
    _check_holding(table, chosen)
    return chosen


def _check_holding(table, chosen):
    """The choice against the node's rule for holdings
    (:func:`rtagent.pci.holding.clash`): the picking above keeps it by
    construction (a device taken takes its relatives out of the free ones),
    so a failure here is a bug, stopped before it becomes a double holding."""
    reason = holding.clash(
        [
            (request_id, a, table.get(a).host.parent_addr)
            for request_id, addresses in chosen.items()
            for a in addresses
        ]
    )
    if reason:
        raise errors.DevicesUnavailable(reason=reason)


def _pick_for(request, free, taken, cells, *, cell_sockets, node_uuid):
    """The devices of ``free`` for ``request``, in the strictest NUMA tier
    that has them. :raises errors.DevicesUnavailable: no tier has."""
    matching = [d for d in free.values() if _matches(request, d, node_uuid)]
    wanted = [d for d in matching if _offered(request, d)]
    tiers = _tiers(request.numa_policy, wanted, cells, cell_sockets)
    split = request.provider_counts if node_uuid else None
    picked, tried = None, -1
    for tier in tiers:
        if len(tier) > tried:  # tiers only grow: an equal one fails again
            tried = len(tier)
            if split:
                picked = _pick_split(taken, free, tier, split, cells, node_uuid=node_uuid)
            else:
                picked = _pick(taken, free, tier, request.count, cells)
        if picked is not None:
            return picked
    raise errors.DevicesUnavailable(reason=_shortfall(request, matching, wanted, tiers[-1], cells))


def _held(request, addresses, free, taken, node_uuid):
    """The devices at ``addresses`` for ``request``, by the rules a choice
    follows (:func:`_pick_for`): each one free, matching the request and
    offered to it (a PF only to a request asking for PFs), none twice,
    never a PF beside one of its own VFs (:mod:`rtagent.pci.holding`),
    exactly as many as the request asks. NUMA is not applied: the guest
    runs with these devices wherever they are.

    :raises errors.InvalidRequest: an address is not one.
    :raises errors.DevicesUnavailable: the devices break a rule; the reason
        names the first device at fault.
    """
    addresses = [pci_address.canonical(a) for a in addresses]
    left = dict(free)
    devs, why = [], None
    for address in addresses:
        dev = left.get(address)
        if dev is None:
            why = _not_free(address, devs, free, taken)
        elif not _matches(request, dev, node_uuid):
            why = f"{address} does not match it"
        elif not _offered(request, dev):
            why = f"{address} is a {dev.host.dev_type} device it does not ask for"
        if why:
            break
        devs.append(dev)
        for other in taken[address]:
            left.pop(other, None)
    if why is None and len(devs) != request.count:
        why = f"that is {len(devs)} device(s)"
    if why:
        raise errors.DevicesUnavailable(
            reason=f"request {request.request_id} ({request.describe()}) needs "
            f"{request.count}: the guest runs with {', '.join(addresses) or 'none'}, and {why}"
        )
    return devs


def _not_free(address, devs, free, taken):
    """Why ``address``, not among the devices left, cannot be held next to
    ``devs`` (those already taken for the same request)."""
    for dev in devs:
        if dev.address == address:
            return f"{address} is named twice"
        if address in taken[dev.address]:
            return f"{address} and {dev.address} are a PF and one of its VFs"
    if address in free:  # taken along by an earlier request's device
        return f"{address} is held for another request or blocked by one"
    return f"{address} is not a free device"


def _view(dev):
    """What a spec is matched against and a pool is keyed by (nova's pool dict)."""
    host = dev.host
    view = {k: v for k, v in dev.tags.items() if k not in _PLACEMENT_KEYS}
    if host.dev_type in (model.TYPE_PF, *model.CHILD_TYPES):
        view.setdefault("remote_managed", "false")
    view.update(
        vendor_id=host.vendor_id,
        product_id=host.product_id,
        numa_node=host.numa_node,
        dev_type=host.dev_type,
        address=host.parent_addr or host.address,
    )
    return view


def _tags(view):
    return tuple(sorted((k, v) for k, v in view.items() if k not in _KEY_FIELDS))


def _norm(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value.lower()
    if isinstance(value, list | tuple):
        return tuple(_norm(v) for v in value)
    return value


def _as_string(value):
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return _norm(value)
    if isinstance(value, list | tuple):
        return json.dumps(list(value), default=str)
    return str(value)


def _spec_matches(spec, view, provider=None):
    rp_uuids = spec.get("rp_uuids")
    if rp_uuids and provider is not None and provider not in rp_uuids:
        return False
    for key, want in spec.items():
        if key in _PLACEMENT_KEYS:
            continue
        have, need = _norm(view.get(key)), _norm(want)
        if isinstance(need, tuple) and isinstance(have, tuple):
            if not set(need) <= set(have):
                return False
        elif need != have:
            return False
    return True


def _matches(request, dev, node_uuid=None):
    view = _view(dev)
    # Only a spec naming providers (rp_uuids) looks at the device's: its
    # UUID (a SHA-1) is not computed for every device of every claim.
    provider = None
    if node_uuid and any(spec.get("rp_uuids") for spec in request.specs):
        provider = provider_uuid(node_uuid, view["address"])
    if not any(_spec_matches(spec, view, provider) for spec in request.specs):
        return False
    # No device provider in Placement checks these yet: check them here.
    return not request.placement_entries or any(
        a.matches(dev.host, dev.tags, in_placement=True) for a in request.placement_entries
    )


def _offered(request, dev):
    """nova keeps PFs, vDPA devices and remote-managed devices for requests
    that name them."""
    kept = (model.TYPE_PF, model.TYPE_VDPA)
    if dev.host.dev_type in kept and not any(
        _norm(s.get("dev_type")) == _norm(dev.host.dev_type) for s in request.specs
    ):
        return False
    if _norm(_view(dev).get("remote_managed")) in _TRUE:
        return any(_norm(s.get("remote_managed")) in _TRUE for s in request.specs)
    return True


def _tiers(policy, wanted, cells, cell_sockets):
    """The device sets a policy allows, strictest first."""
    if not cells:
        return [wanted]
    local = [d for d in wanted if d.host.numa_node in cells]
    if policy == REQUIRED:
        return [local]
    if policy == SOCKET:
        sockets = {cell_sockets[c] for c in cells if cell_sockets.get(c) is not None}
        # A device on the guest's own cell is on its socket, known or not.
        same_socket = local + [
            d
            for d in wanted
            if d.host.numa_node not in cells
            and d.host.numa_node is not None
            and cell_sockets.get(d.host.numa_node) in sockets
        ]
        return [local, same_socket]
    no_node = local + [d for d in wanted if d.host.numa_node is None]
    return [local, no_node] if policy == LEGACY else [local, no_node, wanted]


def _pick(taken, free, tier, count, cells):
    """``count`` devices of ``tier``, best first (see the module doc), or None."""
    left = dict(free)
    candidates = {d.address: d for d in tier}
    picked = []
    while len(picked) < count:
        if not candidates:
            return None
        best = min(
            candidates.values(),
            key=lambda d: (
                _numa_rank(d, cells),
                len(taken[d.address] & left.keys()),
                d.host.parent_addr or d.address,
                -_address_number(d.address),
            ),
        )
        picked.append(best)
        for address in taken[best.address]:
            left.pop(address, None)
            candidates.pop(address, None)
    return picked


def _pick_split(taken, free, tier, counts, cells, *, node_uuid):
    """Of ``tier``, ``counts[provider]`` devices of each provider (best
    first within each, as :func:`_pick`), or None."""
    left = dict(free)
    picked = []
    for provider, count in sorted(counts.items()):
        own = [
            d
            for d in tier
            if d.address in left and provider_uuid(node_uuid, _view(d)["address"]) == provider
        ]
        got = _pick(taken, left, own, count, cells)
        if got is None:
            return None
        picked += got
        for dev in got:
            for address in taken[dev.address]:
                left.pop(address, None)
    return picked


def _address_number(address):
    """``dddd:bb:ss.f`` as one number, for ordering."""
    return int(address.replace(":", "").replace(".", ""), 16)


def _numa_rank(dev, cells):
    if not cells or dev.host.numa_node in cells:
        return 0
    return 1 if dev.host.numa_node is None else 2


def _taken_along(table):
    """Address -> the addresses taking that device makes unusable: itself,
    a PF's VFs, a VF's PF."""
    taken = {dev.address: {dev.address} for dev in table}
    for pf, vfs in devices.children_of(table.devices).items():
        taken[pf].update(vfs)
        for vf in vfs:
            taken[vf].add(pf)
    return {address: frozenset(group) for address, group in taken.items()}


def _shortfall(request, matching, wanted, allowed, cells):
    reason = f"request {request.request_id} ({request.describe()}) needs {request.count}: "
    reason += f"{len(matching)} free device(s) match"
    if len(wanted) < len(matching):
        reason += f" ({len(matching) - len(wanted)} of them PFs or remote-managed, not asked for)"
    if cells:
        reason += (
            f", {len(allowed)} on NUMA cells the {request.numa_policy} policy allows"
            f" (guest on host cells {sorted(cells)})"
        )
    if len(allowed) >= request.count:
        reason += "; a PF and its VFs cannot both be taken"
    return reason
