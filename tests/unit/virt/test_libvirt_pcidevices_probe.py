"""PCI devices from canned node-device XML.

``nodedev-virtio-net-1af4-1041.xml``, ``nodedev-net-eth0.xml`` and
``nodedev-host-bridge-8086-0d57.xml`` were captured from libvirtd 9.0.0 on a
QEMU guest of this project's kind (no NUMA, no vendor names). The others
are written in the shape libvirt 9 prints (``node_device_conf.c``, its
``tests/nodedevschemadata``): a dual-socket server with an X710 PF and its
VFs on NUMA node 0 and a Tesla T4 on node 1.
"""

import dataclasses
import pathlib

import pytest

from rtagent.pci import model
from rtagent.virt import errors
from rtagent.virt.libvirt.probes import pcidevices

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "libvirt"

GPU = model.HostDevice(
    address="0000:af:00.0",
    vendor_id="10de",
    product_id="1eb8",
    dev_type=model.TYPE_PCI,
    numa_node=1,
    class_code="030200",
)
PF = model.HostDevice(
    address="0000:3b:00.0",
    vendor_id="8086",
    product_id="1572",
    dev_type=model.TYPE_PF,
    numa_node=0,
    class_code="020000",
)
VF = model.HostDevice(
    address="0000:3b:02.1",
    vendor_id="8086",
    product_id="154c",
    dev_type=model.TYPE_VF,
    numa_node=0,
    parent_addr="0000:3b:00.0",
    class_code="020000",
)
VIRTIO_NET = model.HostDevice(
    address="0000:00:03.0", vendor_id="1af4", product_id="1041", class_code="020000"
)
HOST_BRIDGE = model.HostDevice(
    address="0000:00:00.0", vendor_id="8086", product_id="0d57", class_code="060000"
)
ROOT_PORT = model.HostDevice(
    address="0000:3a:00.0", vendor_id="8086", product_id="2030", numa_node=0, class_code="060400"
)


def fixture(name):
    return (FIXTURES / f"nodedev-{name}.xml").read_text()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gpu-10de-1eb8", GPU),
        ("sriov-pf-8086-1572", PF),
        ("sriov-vf-8086-154c", VF),
        ("virtio-net-1af4-1041", VIRTIO_NET),  # no <numa>: unknown
        # Bridges are PCI devices too; the device spec, not discovery,
        # keeps them from being assigned (as in nova).
        ("host-bridge-8086-0d57", HOST_BRIDGE),
        ("root-port-8086-2030", ROOT_PORT),
    ],
)
def test_one_pci_device(name, expected):
    assert pcidevices.pci_device(fixture(name)) == expected


@pytest.mark.parametrize("name", ["computer", "net-eth0", "net-ens1f0"])
def test_other_node_devices_are_not_pci_devices(name):
    assert pcidevices.pci_device(fixture(name)) is None


def test_a_pf_with_no_vf_enabled_is_still_a_pf():
    # libvirt writes virt_functions for any SR-IOV capable function
    # (maxCount from sriov_totalvfs); nova needs neither VFs nor maxCount.
    xml = fixture("sriov-pf-8086-1572")
    start = xml.index("<capability type='virt_functions'")
    end = xml.index("</capability>", start) + len("</capability>")
    for cap in ("<capability type='virt_functions' maxCount='64'/>", ""):
        stripped = xml[:start] + cap + xml[end:]
        expected = model.TYPE_PF if cap else model.TYPE_PCI
        assert pcidevices.pci_device(stripped).dev_type == expected


def test_a_phys_function_without_an_address_is_a_plain_pci_device():
    xml = fixture("sriov-vf-8086-154c").replace(
        "<address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/>", ""
    )
    device = pcidevices.pci_device(xml)
    assert (device.dev_type, device.parent_addr) == (model.TYPE_PCI, None)


def test_numa_node_minus_one_is_unknown():
    xml = fixture("gpu-10de-1eb8").replace("<numa node='1'/>", "<numa node='-1'/>")
    assert pcidevices.pci_device(xml).numa_node is None


def test_hex_is_normalised_to_lower_case_and_padded():
    xml = (
        fixture("gpu-10de-1eb8")
        .replace("id='0x10de'", "id='0x10DE'")
        .replace("id='0x1eb8'", "id='1EB8'")  # libvirt's parser reads ids as hex
        .replace("<class>0x030200</class>", "<class>0x30200</class>")
        .replace("<bus>175</bus>", "<bus>0xAF</bus>")
        .replace("<slot>0</slot>", "<slot>0x1F</slot>")
        .replace("<function>0</function>", "<function>7</function>")
    )
    device = pcidevices.pci_device(xml)
    assert (device.address, device.vendor_id, device.product_id, device.class_code) == (
        "0000:af:1f.7",
        "10de",
        "1eb8",
        "030200",
    )
    vf = pcidevices.pci_device(
        fixture("sriov-vf-8086-154c").replace("bus='0x3b' slot='0x00'", "bus='0x3B' slot='0x0'")
    )
    assert vf.parent_addr == "0000:3b:00.0"


def test_a_device_without_a_class_has_an_empty_class_code():
    xml = fixture("gpu-10de-1eb8").replace("<class>0x030200</class>", "")
    assert pcidevices.pci_device(xml).class_code == ""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("<capability type='pci'>", "<capability type='pci'"),  # not XML
        ("<bus>175</bus>", ""),
        ("<bus>175</bus>", "<bus>af</bus>"),
        ("<bus>175</bus>", "<bus>256</bus>"),
        ("<slot>0</slot>", "<slot>32</slot>"),
        ("<function>0</function>", "<function>-1</function>"),
        ("<vendor id='0x10de'>NVIDIA Corporation</vendor>", ""),
        ("id='0x10de'", "id='NVIDIA'"),
        ("id='0x1eb8'", "id='0x10000'"),
        ("<numa node='1'/>", "<numa node='one'/>"),
        ("<class>0x030200</class>", "<class>display</class>"),
    ],
)
def test_malformed_pci_device_is_a_host_read_error(old, new):
    xml = fixture("gpu-10de-1eb8")
    assert old in xml
    with pytest.raises(errors.HostReadError) as exc:
        pcidevices.pci_device(xml.replace(old, new))
    assert exc.value.code == "virt.host_read_error"


@pytest.mark.parametrize("xml", ["", None, "<device>", "<capabilities/>"])
def test_not_a_node_device_is_a_host_read_error(xml):
    with pytest.raises(errors.HostReadError):
        pcidevices.pci_device(xml)


def host(*names):
    """name -> XML as the driver would gather it, keyed by <name>."""
    xmls = [fixture(n) for n in names]
    return {x.split("<name>")[1].split("</name>")[0]: x for x in xmls}


def test_whole_host_sorted_by_address_with_interface_names():
    xml_by_name = host(
        "gpu-10de-1eb8",
        "computer",
        "net-ens1f0",
        "sriov-vf-8086-154c",
        "root-port-8086-2030",
        "sriov-pf-8086-1572",
        "virtio-net-1af4-1041",
        "net-eth0",
    )
    assert pcidevices.pci_devices(xml_by_name) == (
        dataclasses.replace(VIRTIO_NET, devname="eth0"),
        ROOT_PORT,
        dataclasses.replace(PF, devname="ens1f0"),
        VF,  # vfio-pci: no netdev of its own
        GPU,
    )


def test_a_vf_with_its_own_netdev_and_a_function_with_two():
    vf_net = fixture("net-ens1f0").replace("pci_0000_3b_00_0", "pci_0000_3b_02_1")
    second_port = fixture("net-ens1f0").replace("ens1f0", "ens1d1")
    xml_by_name = host("sriov-pf-8086-1572", "sriov-vf-8086-154c")
    xml_by_name.update({"net_ens1f0v1_x": vf_net.replace("ens1f0", "ens1f0v1")})
    xml_by_name.update({"net_ens1f0_x": fixture("net-ens1f0"), "net_ens1d1_x": second_port})
    pf, vf = pcidevices.pci_devices(xml_by_name)
    assert (pf.devname, vf.devname) == ("ens1d1", "ens1f0v1")


def test_no_devices_and_no_pci_devices():
    assert pcidevices.pci_devices({}) == ()
    assert pcidevices.pci_devices(host("computer", "net-eth0")) == ()


def test_one_bad_device_fails_the_host_naming_it():
    xml_by_name = host("gpu-10de-1eb8", "sriov-pf-8086-1572")
    xml_by_name["pci_0000_af_00_0"] = xml_by_name["pci_0000_af_00_0"].replace(
        "<bus>175</bus>", "<bus>x</bus>"
    )
    with pytest.raises(errors.HostReadError, match="pci_0000_af_00_0"):
        pcidevices.pci_devices(xml_by_name)


def test_two_node_devices_with_one_address_is_a_host_read_error():
    xml_by_name = host("gpu-10de-1eb8")
    xml_by_name["pci_0000_af_00_0_again"] = xml_by_name["pci_0000_af_00_0"]
    with pytest.raises(errors.HostReadError, match=r"0000:af:00\.0"):
        pcidevices.pci_devices(xml_by_name)


def test_unparsable_xml_in_a_host_names_its_device():
    xml_by_name = host("gpu-10de-1eb8")
    xml_by_name["pci_0000_3b_00_0"] = "<device><name>"
    with pytest.raises(errors.HostReadError, match="node device pci_0000_3b_00_0"):
        pcidevices.pci_devices(xml_by_name)


# A vdpa node device as libvirt 9 prints it (its tests/nodedevschemadata
# vdpa_vdpa0.xml), whose parent is the VF.
VDPA_XML = """<device>
  <name>vdpa_vdpa0</name>
  <path>/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:02.1/vdpa0</path>
  <parent>pci_0000_3b_02_1</parent>
  <driver><name>vhost_vdpa</name></driver>
  <capability type='vdpa'><chardev>/dev/vhost-vdpa-0</chardev></capability>
</device>"""


def test_a_vf_that_a_vdpa_device_sits_on_is_a_vdpa_device():
    xml_by_name = host("sriov-pf-8086-1572", "sriov-vf-8086-154c")
    assert pcidevices.pci_devices(xml_by_name)[1].dev_type == model.TYPE_VF
    xml_by_name["vdpa_vdpa0"] = VDPA_XML
    pf, vf = pcidevices.pci_devices(xml_by_name)
    assert vf == dataclasses.replace(VF, dev_type=model.TYPE_VDPA)
    assert pf == PF  # the PF stays a PF
