# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""PCI devices probe: libvirt node-device XML to :class:`HostDevice` values.

Input is what ``virNodeDevice.XMLDesc(0)`` returns. The rules are nova
34.0.0's (``Host._get_pcidev_info``):

- a function with a ``virt_functions`` capability is a PF, even with no VF
  enabled: libvirt writes that capability only for an SR-IOV capable
  function (``maxCount`` > 0) or one that has VFs;
- one with a ``phys_function`` capability naming an address is a VF of that
  PF; without an address it stays a plain PCI device;
- everything else, bridges included, is ``type-PCI``; which devices may be
  assigned is for the device spec to say, not discovery;
- ``<numa node>`` absent (libvirt omits it for -1) or -1 means unknown.

libvirt writes domain/bus/slot/function in decimal and ids and the class as
``0x`` hex. The interface name of a NIC function is not in its own XML: it
is in the ``net`` node device whose ``<parent>`` is that function, which is
why :func:`pci_devices` takes ``net`` devices too. Likewise a VF is nova's
``vdpa`` type when a ``vdpa`` node device has it as its ``<parent>``. nova's
sysfs reads (MAC addresses, VF numbers, PF interface names) are not here.
"""

import dataclasses

from rtagent.pci import address as pci_address
from rtagent.pci import model
from rtagent.virt import errors
from rtagent.virt.libvirt.probes import xmlutil

WHAT = "node device XML"
# (element, largest value): the PCI address parts.
_ADDRESS_PARTS = (("domain", 0xFFFF), ("bus", 0xFF), ("slot", 0x1F), ("function", 0x7))


def pci_device(xml):
    """The PCI function one node device describes.

    :param xml: ``virNodeDevice.XMLDesc(0)``.
    :returns: a :class:`rtagent.pci.model.HostDevice` with no ``devname``
        (see :func:`pci_devices`), or None when the node device is not a
        PCI device (``net``, ``system``, ``usb_device``, ...).
    :raises rtagent.virt.errors.HostReadError: the XML does not parse or a
        PCI device lacks or garbles its address, ids or NUMA node.
    """
    root = _device(xml)
    return _pci(root, _what(root))


def pci_devices(xml_by_name):
    """Every PCI function of a host, with NIC interface names.

    :param xml_by_name: node-device name -> ``XMLDesc(0)``, for the devices
        ``listAllDevices(CAP_PCI_DEV | CAP_NET | CAP_VDPA)`` returned;
        without the ``net`` ones no device gets a ``devname``, without the
        ``vdpa`` ones no VF is a vDPA device. Other devices are ignored.
    :returns: tuple of :class:`rtagent.pci.model.HostDevice` sorted by
        address. A function with several interfaces (one port per netdev
        on some NICs) is named after the first in sorted order.
    :raises rtagent.virt.errors.HostReadError: an XML is bad (see
        :func:`pci_device`) or two node devices claim one PCI address.
    """
    by_name = {}
    ifnames = {}
    vdpa_parents = set()
    for name, xml in xml_by_name.items():
        root = _device(xml, f"node device {name}")
        device = _pci(root, _what(root, name))
        if device is not None:
            by_name[name] = device
            continue
        interface = root.findtext("capability[@type='net']/interface")
        parent = root.findtext("parent")
        if interface and parent:
            ifnames.setdefault(parent, []).append(interface.strip())
        if parent and root.find("capability[@type='vdpa']") is not None:
            vdpa_parents.add(parent.strip())
    found = {}
    for name, device in by_name.items():
        if device.address in found:
            raise errors.HostReadError(
                what=WHAT, reason=f"{name} and {found[device.address][0]} are both {device.address}"
            )
        named = (
            dataclasses.replace(device, devname=min(ifnames[name])) if name in ifnames else device
        )
        if name in vdpa_parents and named.dev_type == model.TYPE_VF:
            named = dataclasses.replace(named, dev_type=model.TYPE_VDPA)
        found[device.address] = (name, named)
    return tuple(found[address][1] for address in sorted(found))


def _device(xml, what=WHAT):
    root = xmlutil.parse(xml, what)
    if root.tag != "device":
        raise errors.HostReadError(what=what, reason=f"root is <{root.tag}>, not <device>")
    return root


def _what(root, name=None):
    return f"node device {root.findtext('name') or name or '?'}"


def _pci(root, what):
    cap = root.find("capability[@type='pci']")
    if cap is None:
        return None
    address = _address(
        [_number(cap.findtext(part), part, limit, what) for part, limit in _ADDRESS_PARTS]
    )
    dev_type, parent_addr = model.TYPE_PCI, None
    # nova takes the first SR-IOV capability in document order.
    for sub in cap.findall("capability"):
        if sub.get("type") == "virt_functions":
            dev_type = model.TYPE_PF
            break
        pf = sub.find("address")
        if sub.get("type") == "phys_function" and pf is not None:
            dev_type, parent_addr = model.TYPE_VF, _attr_address(pf, what)
            break
    numa = cap.find("numa")
    numa_node = None if numa is None else xmlutil.int_attr(numa, "node", what)
    klass = cap.findtext("class")
    return model.HostDevice(
        address=address,
        vendor_id=_id(cap, "vendor", what),
        product_id=_id(cap, "product", what),
        dev_type=dev_type,
        numa_node=None if numa_node is None or numa_node < 0 else numa_node,
        parent_addr=parent_addr,
        class_code="" if klass is None else f"{_hex(klass, 'class', 0xFFFFFF, what):06x}",
    )


def _address(parts):
    return pci_address.from_parts(*parts)


def _attr_address(elem, what):
    """An ``<address domain='0x0000' bus='0x3b' .../>``, always hex."""
    return _address([_hex(elem.get(part), part, limit, what) for part, limit in _ADDRESS_PARTS])


def _id(cap, tag, what):
    elem = cap.find(tag)
    if elem is None:
        raise errors.HostReadError(what=what, reason=f"no <{tag}>")
    return f"{_hex(elem.get('id'), tag + ' id', 0xFFFF, what):04x}"


def _number(text, name, limit, what):
    """Decimal as libvirt writes it, or ``0x`` hex."""
    if text is None:
        raise errors.HostReadError(what=what, reason=f"no <{name}>")
    value = text.strip()
    base = 16 if value[:2].lower() == "0x" else 10
    return _checked(value, base, name, limit, what)


def _hex(text, name, limit, what):
    return _checked((text or "").strip(), 16, name, limit, what)


def _checked(value, base, name, limit, what):
    try:
        number = int(value, base)
    except ValueError as exc:
        raise errors.HostReadError(what=what, reason=f"{name} {value!r}") from exc
    if not 0 <= number <= limit:
        raise errors.HostReadError(what=what, reason=f"{name} {value!r} out of range")
    return number
