"""Which PCI devices a node's claims hold, and the choice of free devices
for a claim's PCI requests. Pure functions over a
:class:`~rtagent.tracker.state.NodeState`.

The devices are part of the claims (an instance's ``pci_devices``, a
move's ``old_pci`` and ``new_pci``): they are written with the claim's row,
in its one transaction, and the node's device table is rebuilt from them
(:func:`rtagent.pci.node.with_claims`), never patched.
"""

from rtagent.pci import devices as pcidevs
from rtagent.pci import errors as pci_errors
from rtagent.pci import held as pci_held
from rtagent.tracker import ledger


def holds(state):
    """``(owner, HeldDevice, status)`` for every PCI device a claim of
    ``state``'s node holds, sorted by owner then address, counted as NUMA
    claims are (``NodeState.numa_held``): an instance here holds its own
    (allocated); a same-node resize holds the old and the new devices; an
    incoming move the new ones, an outgoing move that has left the old ones
    (claimed: those the instance does not hold now). The owner is always
    the instance. O(moves + instances holding devices): the instances come
    from the carried sums."""
    found, replaced = [], set()
    for move in ledger.latest_migrations(state.migrations.values()).values():
        instance = state.instances.get(move.instance_uuid)
        if instance is not None and not move.same_node:
            continue
        if move.same_node:
            replaced.add(move.instance_uuid)
            sides = move.old_pci + move.new_pci
        elif move.dest_node == state.node_uuid:
            sides = move.new_pci
        else:
            sides = move.old_pci
        own = frozenset(instance.pci_devices) if instance is not None else frozenset()
        found.extend(
            (move.instance_uuid, h, pcidevs.ALLOCATED if h in own else pcidevs.CLAIMED)
            for h in sides
        )
    for uuid, held in state.sums.pci.items():
        if uuid not in replaced:
            found.extend((uuid, h, pcidevs.ALLOCATED) for h in held)
    return sorted(found, key=lambda hold: (hold[0], hold[1].address))


def any_held(moves):
    """Whether any of ``moves`` holds PCI devices (on either side)."""
    return any(m.old_pci or m.new_pci for m in moves)


def ensure_fits(state, requests, numa=None, held=None):
    """Choose the node's free PCI devices for ``requests``
    (:class:`~rtagent.pci.pools.PciRequest` values), given every device
    the node's claims and domains hold. For a guest with a NUMA claim
    (``numa``), each request's NUMA policy is applied against the host
    cells its cells were placed on; for one without, no device is
    filtered by NUMA node.

    :param held: {request id: addresses} a guest already runs with (an
        instance claimed after the fact): those requests take them.
    :returns: the :class:`~rtagent.pci.held.HeldDevice` values chosen, in
        request order; ``()`` for no request.
    :raises rtagent.pci.errors.DevicesUnavailable: a request cannot be met.
    """
    return DeviceChoice(state, requests, held).take(numa)


class DeviceChoice:
    """The devices one claim's ``requests`` get on ``state``, by the host
    cells its guest is placed on: the NUMA fitter asks which layouts allow
    them (:meth:`allows`, its ``accept``), then the claim takes those of
    the layout placed (:meth:`take`, as :func:`ensure_fits`).

    The choice is a pure function of the state, the requests, the held
    devices and the cells, and a DeviceChoice serves one transition of one
    (immutable) state, so the devices of a layout the fitter accepted are
    not chosen a second time when the claim takes them.
    """

    def __init__(self, state, requests, held=None):
        self._state = state
        self._requests = requests
        self._held = held
        self._found = {}  # host cells (sorted tuple, or None) -> devices

    def take(self, numa):
        """The devices for a guest whose NUMA claim is ``numa`` (None: no
        NUMA filtering); ``()`` for no request.

        :raises rtagent.pci.errors.DevicesUnavailable: a request cannot be met.
        """
        if not self._requests:
            return ()
        return self._chosen(_cells(numa.fits) if numa is not None else None)

    def allows(self, fits):
        """Whether the requests can be had with the guest on the host cells
        of ``fits`` (NUMA ``CellFit`` values)."""
        try:
            self._chosen(_cells(fits))
        except pci_errors.DevicesUnavailable:
            return False
        return True

    def _chosen(self, cells):
        found = self._found.get(cells)
        if found is None:
            found = _choose(self._state, self._requests, cells, self._held)
            self._found[cells] = found
        return found


def _cells(fits):
    return tuple(sorted({f.host_cell for f in fits}))


def _choose(state, requests, cells, held=None):
    sockets = {c.id: c.socket for c in state.host.numa_cells if c.socket is not None}
    return pci_held.choose(state.pci_devices, requests, cells, sockets, state.node_uuid, held=held)


def cell_rank(state, requests):
    """callable(host cell id) -> its rank for the NUMA fitter, as nova
    orders cells on a host that tracks PCI devices: the cells with the most
    free devices first for a guest with ``requests``, last for one without
    (so it leaves them to guests that need them). None when the node tracks
    no PCI device."""
    free = {}
    for dev in pcidevs.available(state.pci_devices):
        free[dev.host.numa_node] = free.get(dev.host.numa_node, 0) + 1
    if not free:
        return None
    sign = -1 if requests else 1
    return lambda cell: sign * free.get(cell, 0)
