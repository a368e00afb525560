"""The PCI devices a host has, as discovery reports them. Immutable."""

import dataclasses

# nova's device types (nova.objects.fields.PciDeviceType).
TYPE_PCI = "type-PCI"
TYPE_PF = "type-PF"
TYPE_VF = "type-VF"
# A VF that the host exposes as a vDPA device (nova's "vdpa"): a VF in every
# relation to its PF, given only to requests that ask for vDPA (a port of
# vnic_type vdpa); an alias cannot name it, as in nova.
TYPE_VDPA = "vdpa"
DEVICE_TYPES = (TYPE_PCI, TYPE_PF, TYPE_VF, TYPE_VDPA)
# The types created by a PF, counted with it (its dependants).
CHILD_TYPES = (TYPE_VF, TYPE_VDPA)
# The types an alias's device_type may name.
ALIAS_DEVICE_TYPES = (TYPE_PCI, TYPE_PF, TYPE_VF)

# How far from the guest's NUMA cells a device may be: nova's
# PCINUMAAffinityPolicy, as an alias's numa_policy or a request's names it.
REQUIRED, LEGACY, PREFERRED, SOCKET = "required", "legacy", "preferred", "socket"
NUMA_POLICIES = (REQUIRED, LEGACY, PREFERRED, SOCKET)


@dataclasses.dataclass(frozen=True)
class HostDevice:
    """One PCI function on the host.

    :param address: ``dddd:bb:ss.f``, lower-case hex.
    :param vendor_id: 4 lower-case hex digits (``8086``).
    :param product_id: 4 lower-case hex digits.
    :param dev_type: one of :data:`DEVICE_TYPES`; a PF is a function that
        can create VFs, a VF (or a vDPA device) one created by a PF.
    :param numa_node: the host NUMA cell the device is attached to, or None
        when the host does not say.
    :param parent_addr: a VF's (or vDPA device's) PF address; None otherwise.
    :param class_code: the 6-hex-digit PCI class (``020000`` is Ethernet).
    :param devname: the network interface name of a NIC function, if any.
    """

    address: str
    vendor_id: str
    product_id: str
    dev_type: str = TYPE_PCI
    numa_node: int | None = None
    parent_addr: str | None = None
    class_code: str = ""
    devname: str | None = None
