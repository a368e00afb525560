"""The CPUs a domain XML's ``<cputune>`` pins it to."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt.probes.cputune import pinned_cpus


def domain(cputune=""):
    return f"<domain type='kvm'><name>g</name><vcpu>2</vcpu>{cputune}</domain>"


@pytest.mark.parametrize(
    ("cputune", "expected"),
    [
        ("", set()),
        ("<cputune><shares>2048</shares></cputune>", set()),
        # nova's pinned guest: one CPU per vCPU, the emulator on their union
        (
            "<cputune><vcpupin vcpu='0' cpuset='4'/><vcpupin vcpu='1' cpuset='20'/>"
            "<emulatorpin cpuset='4,20'/></cputune>",
            {4, 20},
        ),
        # emulator threads isolated on a CPU of their own
        ("<cputune><vcpupin vcpu='0' cpuset='4'/><emulatorpin cpuset='5'/></cputune>", {4, 5}),
        # a floating NUMA guest: every vCPU on the cell's shared CPUs (ranges,
        # exclusions)
        ("<cputune><vcpupin vcpu='0' cpuset='0-3,^2'/></cputune>", {0, 1, 3}),
        ("<cputune><vcpupin vcpu='0'/></cputune>", set()),
    ],
)
def test_pinned_cpus(cputune, expected):
    assert pinned_cpus(domain(cputune)) == frozenset(expected)


@pytest.mark.parametrize("xml", ["<domain", domain("<cputune><vcpupin cpuset='x'/></cputune>")])
def test_unreadable_xml_is_a_host_read_error(xml):
    with pytest.raises(errors.HostReadError):
        pinned_cpus(xml)
