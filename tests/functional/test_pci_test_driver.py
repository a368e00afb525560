"""PCI discovery against libvirt's test driver: a host file with an SR-IOV PF,
its VFs and a GPU, read back through the node-device API."""

import pathlib

import libvirt
import pytest

from rtagent.pci import model
from rtagent.virt.libvirt.probes import pcidevices

pytestmark = pytest.mark.functional

HOST_XML = (
    pathlib.Path(__file__).resolve().parents[1]
    / "fixtures"
    / "libvirt"
    / "test-driver-sriov-host.xml"
)


def test_pf_vfs_and_gpu_from_node_devices():
    conn = libvirt.open(f"test://{HOST_XML}")
    try:
        # One list call, then one XMLDesc per device: what an audit costs.
        flags = (
            libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_PCI_DEV
            | libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_NET
        )
        xml_by_name = {dev.name(): dev.XMLDesc(0) for dev in conn.listAllDevices(flags)}
    finally:
        conn.close()

    devices = {d.address: d for d in pcidevices.pci_devices(xml_by_name)}

    pf = devices.pop("0000:3b:00.0")
    assert (pf.vendor_id, pf.product_id, pf.dev_type) == ("8086", "1572", model.TYPE_PF)
    assert (pf.numa_node, pf.class_code, pf.devname) == (0, "020000", "ens1f0")
    vfs = [devices.pop(f"0000:3b:02.{fn}") for fn in range(4)]
    assert {(vf.product_id, vf.dev_type, vf.parent_addr, vf.numa_node) for vf in vfs} == {
        ("154c", model.TYPE_VF, "0000:3b:00.0", 0)
    }
    gpu = devices.pop("0000:af:00.0")
    assert (gpu.vendor_id, gpu.product_id, gpu.dev_type) == ("10de", "1eb8", model.TYPE_PCI)
    assert (gpu.numa_node, gpu.class_code) == (1, "030200")
    # What is left is the root port: a PCI device, not assignable by spec.
    assert [(d.address, d.class_code) for d in devices.values()] == [("0000:3a:00.0", "060400")]
