"""The tracker's values: flavors, inventories, instances, claims, snapshots.

Everything here is immutable. Readers receive these values, never the
tracker's internals, so nothing outside the tracker can change its state.
"""

import dataclasses
import types
import uuid as uuidlib

from rtagent.numa.usage import NumaClaim
from rtagent.pci import devices as pcidevs
from rtagent.pci.held import HeldDevice
from rtagent.resources import (  # noqa: F401 - re-exported for the tracker's users
    DISK_GB,
    MEMORY_MB,
    STANDARD_CLASSES,
    VCPU,
    Inventory,
    frozen_map,
)
from rtagent.tracker import errors

# The keys of Nova's scheduler ``limits`` dict that limit a resource class.
LIMIT_KEYS = {"vcpu": VCPU, "memory_mb": MEMORY_MB, "disk_gb": DISK_GB}
# Keys nova may send that are not limits of a resource class: the NUMA
# limits are the node's own allocation ratios (see rtagent.numa), so the
# scheduler's copy of them is accepted and not read.
DEFERRED_LIMIT_KEYS = frozenset({"numa_topology"})


def check_uuid(value, what="instance_uuid"):
    """Return ``value`` normalised to canonical lower-case UUID form.

    :raises InvalidClaimRequest: not a UUID.
    """
    try:
        return str(uuidlib.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise errors.InvalidClaimRequest(reason=f"{what} {value!r} is not a UUID") from None


@dataclasses.dataclass(frozen=True)
class Flavor:
    """The sizes an instance asks for. Memory and swap in MiB, disks in GiB."""

    vcpus: int
    memory_mb: int
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap_mb: int = 0
    name: str = ""

    def __post_init__(self):
        for field in ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap_mb"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise errors.InvalidClaimRequest(
                    reason=f"flavor {field} must be a non-negative integer, got {value!r}"
                )
        if self.vcpus < 1 or self.memory_mb < 1:
            raise errors.InvalidClaimRequest(reason="flavor needs at least 1 vCPU and 1 MiB")

    def to_dict(self):
        # Its fields are numbers and a string: no deep copy needed
        # (dataclasses.asdict's was most of the time a claim's row took to encode).
        return {name: getattr(self, name) for name in _FLAVOR_FIELDS}

    @classmethod
    def from_dict(cls, data):
        return cls(**data)


_FLAVOR_FIELDS = tuple(f.name for f in dataclasses.fields(Flavor))


def releases(vm_state, task_state):
    """True if nova frees an instance's resources in these states (its
    ``allow_resource_removal``): deleted, or shelved-offloaded unless it is
    being unshelved (spawning) here."""
    return vm_state == "deleted" or (vm_state == "shelved_offloaded" and task_state != "spawning")


# Move types, as nova names them in Migration.migration_type.
MOVE_TYPES = frozenset({"resize", "migration", "live-migration", "evacuation"})
# Moves whose claim ends when the instance lands (nothing to confirm).
SELF_CONFIRMING_MOVES = frozenset({"live-migration", "evacuation"})


def _frozen_ids(assigned):
    return frozen_map({rc: tuple(ids) for rc, ids in (assigned or {}).items()})


def _numa_dict(claim):
    return claim.to_dict() if claim is not None else None


def _numa_value(data):
    return NumaClaim.from_dict(data) if data else None


def _pci_list(held):
    return [h.to_dict() for h in held]


def _pci_value(data):
    return tuple(HeldDevice.from_dict(h) for h in data or ())


@dataclasses.dataclass(frozen=True)
class Instance:
    """An instance whose usage this node holds.

    :param resources: resource class -> amount, derived from the flavor.
    :param assigned: resource class -> identifiers claimed by this instance
        (e.g. specific devices), see :mod:`rtagent.tracker.assigned`.
    :param vm_state, task_state, os_type, project_id: nova's, for the
        scheduler's stats (:mod:`rtagent.tracker.stats`).
    :param numa: a :class:`~rtagent.numa.usage.NumaClaim` (its cells, pinned
        CPUs and pages on this node), or None for a guest without a NUMA
        topology.
    :param pci_devices: the PCI devices it holds here
        (:class:`~rtagent.pci.held.HeldDevice` values, in request order).
    """

    uuid: str
    flavor: Flavor
    resources: types.MappingProxyType
    volume_backed: bool = False
    vm_state: str = "building"
    task_state: str | None = None
    project_id: str = ""
    os_type: str | None = None
    assigned: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    numa: NumaClaim | None = None
    pci_devices: tuple = ()

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        return {
            "uuid": self.uuid,
            "flavor": self.flavor.to_dict(),
            "resources": dict(self.resources),
            "volume_backed": self.volume_backed,
            "vm_state": self.vm_state,
            "task_state": self.task_state,
            "project_id": self.project_id,
            "os_type": self.os_type,
            "assigned": {rc: list(ids) for rc, ids in self.assigned.items()},
            "numa": _numa_dict(self.numa),
            "pci_devices": _pci_list(self.pci_devices),
        }

    @classmethod
    def from_dict(cls, data):
        return cls(
            uuid=data["uuid"],
            flavor=Flavor.from_dict(data["flavor"]),
            resources=frozen_map(data["resources"]),
            volume_backed=bool(data.get("volume_backed", False)),
            vm_state=data.get("vm_state", "active"),
            task_state=data.get("task_state"),
            project_id=data.get("project_id", ""),
            os_type=data.get("os_type"),
            assigned=_frozen_ids(data.get("assigned")),
            numa=_numa_value(data.get("numa")),
            pci_devices=_pci_value(data.get("pci_devices")),
        )


@dataclasses.dataclass(frozen=True)
class Migration:
    """A move in progress that involves this node (as source, destination or
    both), with nova's meaning of its fields.

    Nodes are named by node UUID. ``old_*`` is what the instance holds at
    the source, ``new_*`` what it claims at the destination. ``seq`` orders
    updates: when several moves of one instance are in progress, the most
    recently updated one is the one that counts. ``old_pci`` and
    ``new_pci`` are the PCI devices (:class:`~rtagent.pci.held.HeldDevice`)
    the instance holds at the source and takes at the destination.
    """

    uuid: str
    instance_uuid: str
    migration_type: str
    source_node: str
    dest_node: str
    old_flavor: Flavor
    new_flavor: Flavor
    old_resources: types.MappingProxyType
    new_resources: types.MappingProxyType
    status: str = "pre-migrating"
    seq: int = 0
    project_id: str = ""
    os_type: str | None = None
    # The instance's vm_state when the move started: the one it has again
    # where it lands after a revert (or a move that needs no confirm).
    vm_state: str = "active"
    old_assigned: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    new_assigned: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    old_numa: NumaClaim | None = None
    new_numa: NumaClaim | None = None
    old_pci: tuple = ()
    new_pci: tuple = ()

    @property
    def same_node(self):
        return self.source_node == self.dest_node

    def describe(self):
        return (
            f"{self.migration_type} {self.uuid} of instance {self.instance_uuid}: "
            f"{self.source_node} -> {self.dest_node}"
        )

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def to_dict(self):
        # Field by field: asdict() would deep-copy the read-only mappings,
        # which cannot be copied.
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("old_flavor", "new_flavor"):
            data[key] = data[key].to_dict()
        for key in ("old_resources", "new_resources"):
            data[key] = dict(data[key])
        for key in ("old_assigned", "new_assigned"):
            data[key] = {rc: list(ids) for rc, ids in data[key].items()}
        for key in ("old_numa", "new_numa"):
            data[key] = _numa_dict(data[key])
        for key in ("old_pci", "new_pci"):
            data[key] = _pci_list(data[key])
        return data

    @classmethod
    def from_dict(cls, data):
        data = dict(data)
        for key in ("old_flavor", "new_flavor"):
            data[key] = Flavor.from_dict(data[key])
        for key in ("old_resources", "new_resources"):
            data[key] = frozen_map(data[key])
        for key in ("old_assigned", "new_assigned"):
            data[key] = _frozen_ids(data.get(key))
        for key in ("old_numa", "new_numa"):
            data[key] = _numa_value(data.get(key))
        for key in ("old_pci", "new_pci"):
            data[key] = _pci_value(data.get(key))
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Claim:
    """An acknowledged claim: durable before it is returned to the caller.

    ``created`` is False when the call found the same claim already held
    (a retry): whoever rolls back must only undo what it created.
    ``token`` identifies a pending standalone claim this call created
    (see ``Tracker.instance_claim(pending=True)``), else None.
    ``numa`` is where the guest's NUMA cells went, or None.
    ``pci_devices`` the PCI devices it holds (HeldDevice values).
    ``request_ids`` the ids of the PCI requests the call named: on a retry,
    the instance's devices for other ids were attached since.
    """

    instance_uuid: str
    node_uuid: str
    resources: types.MappingProxyType
    created: bool = True
    token: int | None = None
    numa: NumaClaim | None = None
    pci_devices: tuple = ()
    request_ids: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class NodeSnapshot:
    """A consistent copy of one node's state, taken under the tracker lock.

    :param host: the last :class:`rtagent.virt.host.HostView`, or None
        before the first audit.
    :param inventories: resource class -> :class:`Inventory` as the tracker
        checks claims against it (ratios resolved to numbers).
    :param usage: resource class -> amount used: claims, plus untracked
        domains when they are counted (see ``untracked_usage``).
    :param untracked_usage: resource class -> the part of ``usage`` that
        running domains without a claim account for.
    :param instances: tracked instances, sorted by UUID.
    :param policy: the :class:`rtagent.tracker.ledger.ResourcePolicy` in force.
    :param migrations: moves in progress involving this node, sorted by UUID.
    :param stats: nova's scheduler stats (strings), see :mod:`.stats`.
    :param drift: a :class:`rtagent.tracker.drift.Drift` (host vs claims).
    :param assigned_missing: resource class -> identifiers assigned to
        instances that the node no longer offers.
    :param unavailable: why the hypervisor cannot be read now, or None.
    :param released: UUIDs of instances that left this node and whose
        allocations on its providers may be healed (removed).
    :param disabled: why the node is disabled, or None when enabled.
    :param known_consumers: every consumer the node accounts for (see
        ``NodeState.known_consumers``): anything else holding allocations on
        our providers is unknown.
    :param healable: released consumers not active here again: the only
        ones healing may remove.
    :param deleted: those of ``healable`` released as deleted for good:
        healed at the first look.
    :param pending: instances whose standalone claim is being written.
    :param numa_cells: the node's NUMA cells
        (:class:`~rtagent.numa.model.HostCell`) with the usage of every
        claim and move held here: pinned CPUs, shared vCPUs, memory, pages.
    :param pool_usage: a :class:`rtagent.tracker.pooldisk.PoolUsage` (other
        consumers' DISK_GB on a shared disk pool, counted in ``usage``), or
        None.
    :param numa_lost: consumer -> pinned host CPUs its claim keeps that are
        no longer dedicated CPUs of their cell (for the operator).
    :param numa_claims: ``((consumer, NumaClaim), ...)``: every NUMA claim
        the node holds (instances, and moves as they count here), sorted by
        consumer; ``numa_cells`` add up exactly these.
    :param numa_unclaimed: domain UUID -> the dedicated CPUs (sorted) it is
        pinned to that no claim of its own keeps: never pinned by another
        claim (see :mod:`rtagent.numa.running_pins`).
    :param pci_devices: the :class:`~rtagent.pci.devices.DeviceTable` of the
        node's tracked PCI devices (those ``[pci] device_spec`` matches),
        devices held by a domain without a claim marked allocated to it.
    :param pci_held: ``(HeldWithoutClaim, ...)``: tracked PCI devices that a
        domain holds while no claim accounts for them (PCI drift), sorted
        by address (see :mod:`rtagent.pci.node`).
    """

    node_uuid: str
    host: object
    inventories: types.MappingProxyType
    usage: types.MappingProxyType
    instances: tuple
    policy: object = None
    migrations: tuple = ()
    stats: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    drift: object = None
    assigned_missing: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: frozen_map({})
    )
    unavailable: str | None = None
    untracked_usage: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: frozen_map({})
    )
    released: frozenset = frozenset()
    disabled: str | None = None
    known_consumers: frozenset = frozenset()
    healable: frozenset = frozenset()
    deleted: frozenset = frozenset()
    pending: frozenset = frozenset()
    numa_cells: tuple = ()
    numa_lost: types.MappingProxyType = dataclasses.field(default_factory=lambda: frozen_map({}))
    numa_claims: tuple = ()
    numa_unclaimed: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: frozen_map({})
    )
    pci_devices: pcidevs.DeviceTable = dataclasses.field(default_factory=pcidevs.make_table)
    pci_held: tuple = ()
    pool_usage: object = None

    @property
    def hypervisor_hostname(self):
        return self.host.hypervisor_hostname if self.host else None

    @property
    def running_vms(self):
        return len(self.instances)
