"""Hypervisor probe over canned getType / getVersion / getHostname."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt.probes import hypervisor


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("QEMU", 7002022, "cmp-1.example.org"), ("QEMU", 7002022, "cmp-1.example.org")),
        (("TEST", 2, "vm"), ("TEST", 2, "vm")),
        (("QEMU", 0, " cmp-2\n"), ("QEMU", 0, "cmp-2")),
    ],
)
def test_hypervisor(args, expected):
    got = hypervisor.hypervisor(*args)
    assert (
        got["hypervisor_type"],
        got["hypervisor_version"],
        got["hypervisor_hostname"],
    ) == expected


@pytest.mark.parametrize(
    "args",
    [
        ("", 1, "h"),
        (None, 1, "h"),
        ("QEMU", -1, "h"),
        ("QEMU", "7", "h"),
        ("QEMU", True, "h"),
        ("QEMU", 1, ""),
        ("QEMU", 1, "  "),
        ("QEMU", 1, None),
    ],
)
def test_bad_values_raise(args):
    with pytest.raises(errors.HostReadError):
        hypervisor.hypervisor(*args)
