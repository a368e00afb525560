"""The named fake SR-IOV host the PCI unit tests share: two PFs (8086:1572)
with two VFs each (8086:154c), one PF per NUMA cell, and a GPU's address."""

from rtagent.pci import model

PF1, VF1A, VF1B = "0000:81:00.0", "0000:81:02.0", "0000:81:02.1"
PF2, VF2A, VF2B = "0000:82:00.0", "0000:82:02.0", "0000:82:02.1"
GPU = "0000:05:00.0"


def pf(address, numa_node):
    return model.HostDevice(address, "8086", "1572", model.TYPE_PF, numa_node)


def vf(address, parent, numa_node):
    return model.HostDevice(address, "8086", "154c", model.TYPE_VF, numa_node, parent)


def sriov_pairs():
    """(HostDevice, tags) of the two PFs and their VFs, each on its physnet."""
    return (
        (pf(PF1, 0), {"physical_network": "physnet1"}),
        (vf(VF1A, PF1, 0), {"physical_network": "physnet1"}),
        (vf(VF1B, PF1, 0), {"physical_network": "physnet1"}),
        (pf(PF2, 1), {"physical_network": "physnet2"}),
        (vf(VF2A, PF2, 1), {"physical_network": "physnet2"}),
        (vf(VF2B, PF2, 1), {"physical_network": "physnet2"}),
    )
