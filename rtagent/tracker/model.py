"""The tracker's values: flavors, inventories, instances, claims, snapshots.

Everything here is immutable. Readers receive these values, never the
tracker's internals, so nothing outside the tracker can change its state.
"""

import dataclasses
import types
import uuid as uuidlib

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
# Keys nova may send that this agent does not check yet (NUMA claims come
# with their own issue); accepted so that such builds are not refused.
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
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data):
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class Instance:
    """A tracked instance and the resources its claim holds."""

    uuid: str
    flavor: Flavor
    resources: types.MappingProxyType
    volume_backed: bool = False

    def to_dict(self):
        return {
            "uuid": self.uuid,
            "flavor": self.flavor.to_dict(),
            "resources": dict(self.resources),
            "volume_backed": self.volume_backed,
        }

    @classmethod
    def from_dict(cls, data):
        return cls(
            uuid=data["uuid"],
            flavor=Flavor.from_dict(data["flavor"]),
            resources=frozen_map(data["resources"]),
            volume_backed=bool(data.get("volume_backed", False)),
        )


@dataclasses.dataclass(frozen=True)
class Claim:
    """An acknowledged claim: durable before it is returned to the caller."""

    instance_uuid: str
    node_uuid: str
    resources: types.MappingProxyType


@dataclasses.dataclass(frozen=True)
class NodeSnapshot:
    """A consistent copy of one node's state, taken under the tracker lock.

    :param host: the last :class:`rtagent.virt.host.HostView`, or None
        before the first audit.
    :param inventories: resource class -> :class:`Inventory` as the tracker
        checks claims against it (ratios resolved to numbers).
    :param usage: resource class -> amount used by tracked instances.
    :param instances: tracked instances, sorted by UUID.
    :param policy: the :class:`rtagent.tracker.ledger.ResourcePolicy` in force.
    """

    node_uuid: str
    host: object
    inventories: types.MappingProxyType
    usage: types.MappingProxyType
    instances: tuple
    policy: object = None

    @property
    def hypervisor_hostname(self):
        return self.host.hypervisor_hostname if self.host else None
