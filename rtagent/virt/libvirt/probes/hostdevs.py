# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Host devices probe: the PCI devices and mediated devices a domain holds.

Read from the domain XML (``<hostdev>``), which libvirt 9.0 has no bulk call
for; the driver fetches it once per new domain and keeps the answer until
an event says the domain changed (see ``facts.gather``).
"""

from rtagent.pci import address as pci_address
from rtagent.virt.libvirt.probes import xmlutil


def host_devices(domain_xml):
    """The domain's assigned host devices, sorted.

    PCI devices as ``dddd:bb:ss.f`` addresses, mediated devices (vGPUs) as
    ``mdev:<uuid>``.

    :param domain_xml: ``dom.XMLDesc(0)``.
    :raises rtagent.virt.errors.HostReadError: the XML does not parse.
    """
    root = xmlutil.parse(domain_xml, "domain XML")
    found = []
    for hostdev in root.findall("./devices/hostdev[@mode='subsystem']"):
        address = hostdev.find("./source/address")
        if address is None:
            continue
        if hostdev.get("type") == "pci":
            found.append(
                pci_address.from_parts(
                    *(int(address.get(k, "0"), 0) for k in ("domain", "bus", "slot", "function"))
                )
            )
        elif hostdev.get("type") == "mdev" and address.get("uuid"):
            found.append(f"mdev:{address.get('uuid')}")
    return tuple(sorted(found))
