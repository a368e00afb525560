"""Values shared by the tracker and the Placement layer.

An inventory means the same thing to the ledger that checks claims and to
the sync that publishes it, so both use this one type; neither package has
to import the other to speak about it.
"""

import dataclasses
import types

import os_resource_classes as orc

VCPU = orc.VCPU
PCPU = orc.PCPU
MEMORY_MB = orc.MEMORY_MB
DISK_GB = orc.DISK_GB

# The classes the agent accounts for on the root provider, in report order.
STANDARD_CLASSES = (VCPU, MEMORY_MB, DISK_GB)

# Every class the agent derives for the root provider from the host: the
# standard ones, and PCPU from ``[compute] cpu_dedicated_set``. One whose
# total drops to 0 is removed from Placement. PCPU is not a standard class:
# usage shows it only where something holds it, and a host driver that
# reports PCPU itself (nova's, see rtagent.nova) keeps it while the agent
# derives none.
ROOT_CLASSES = (VCPU, PCPU, MEMORY_MB, DISK_GB)


def frozen_map(mapping):
    """A read-only copy of ``mapping``."""
    return types.MappingProxyType(dict(mapping))


@dataclasses.dataclass(frozen=True)
class Inventory:
    """One resource class's inventory, with Placement's field meanings.

    ``allocation_ratio`` None means "not managed by this agent": Placement's
    value is kept (see :mod:`rtagent.placement.diff`).
    """

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = 0
    step_size: int = 1
    allocation_ratio: float | None = 1.0

    @property
    def capacity(self):
        """What can be allocated, exactly as Placement computes it."""
        return (self.total - self.reserved) * (self.allocation_ratio or 0.0)

    def to_placement(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_placement(cls, record):
        """Build from a Placement inventory record (missing fields defaulted)."""
        return cls(
            total=record["total"],
            reserved=record.get("reserved", 0),
            min_unit=record.get("min_unit", 1),
            max_unit=record.get("max_unit", record["total"]),
            step_size=record.get("step_size", 1),
            allocation_ratio=record.get("allocation_ratio", 1.0),
        )
