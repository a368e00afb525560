"""Host devices of a domain, from canned domain XML."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt.probes import hostdevs

DOMAIN = """
<domain type='kvm'>
  <name>vm</name>
  <devices>
    <disk type='file' device='disk'><source file='/var/lib/nova/instances/x/disk'/></disk>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x81' slot='0x00' function='0x3'/></source>
    </hostdev>
    <hostdev mode='subsystem' type='pci' managed='yes'>
      <source><address domain='0x0000' bus='0x03' slot='0x10' function='0x1'/></source>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>
    </hostdev>
    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>
      <source><address uuid='c2177883-f1bb-47f0-914d-32a22e3a8804'/></source>
    </hostdev>
    <hostdev mode='capabilities' type='storage'>
      <source><block>/dev/sdf1</block></source>
    </hostdev>
  </devices>
</domain>
"""


def test_pci_and_mdev_host_devices_are_listed_by_source():
    assert hostdevs.host_devices(DOMAIN) == (
        "0000:03:10.1",  # the guest-side <address> is not the host device
        "0000:81:00.3",
        "mdev:c2177883-f1bb-47f0-914d-32a22e3a8804",
    )


def test_a_domain_without_host_devices():
    assert hostdevs.host_devices("<domain><devices/></domain>") == ()


def test_bad_xml_is_a_host_read_error():
    with pytest.raises(errors.HostReadError):
        hostdevs.host_devices("<domain>")


def test_unchanged_domains_reuse_their_values_and_changed_ones_are_rebuilt():
    from rtagent.virt.libvirt.probes import domains

    stats = {"state.state": 1, "vcpu.current": 2, "balloon.current": 2048 * 1024}
    records = [("u1", "a", dict(stats), None, ()), ("u2", "b", dict(stats), None, ())]
    cache = {}
    first = domains.domains(records, cache)
    again = domains.domains(records, cache)
    assert again[0] is first[0] and again[1] is first[1]
    changed = [records[0], ("u2", "b", dict(stats, **{"state.state": 3}), None, ())]
    third = domains.domains(changed, cache)
    assert third[0] is first[0]
    assert third[1].state == 3
    assert set(cache) == {"u1", "u2"}
    assert domains.domains(changed[:1], cache) == (first[0],)
    assert set(cache) == {"u1"}  # gone domains leave the cache
