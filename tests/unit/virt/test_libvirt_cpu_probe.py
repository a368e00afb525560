"""CPU probe over canned getCPUMap / getInfo results."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt.probes import cpu

# A real 2-CPU QEMU host, and the fixed map of the libvirt test driver.
QEMU_MAP = (2, [True, True], 2)
TEST_DRIVER_MAP = (8, [True, False, True, False, True, False, False, False], 3)
INFO_16 = ["x86_64", 32768, 16, 2400, 1, 2, 4, 2]


@pytest.mark.parametrize(
    ("cpu_map", "info", "expected"),
    [
        (QEMU_MAP, INFO_16, 2),
        (TEST_DRIVER_MAP, INFO_16, 3),
        ((4, [True, False, False, True], 2), None, 2),
        # Hot-unplugged CPUs are off the map; they must not count.
        ((64, [True] * 48 + [False] * 16, 48), INFO_16, 48),
        # getCPUMap unsupported: getInfo's count.
        (None, INFO_16, 16),
    ],
)
def test_online_cpus(cpu_map, info, expected):
    assert cpu.online_cpus(cpu_map, info) == expected


@pytest.mark.parametrize(
    ("cpu_map", "info"),
    [
        (None, None),
        ((2, [False, False], 0), INFO_16),
        ((2, None, 0), INFO_16),
        ("garbage", INFO_16),
        (None, ["x86_64", 1024]),
        (None, ["x86_64", 1024, 0, 0, 0, 0, 0, 0]),
    ],
)
def test_unusable_facts_raise(cpu_map, info):
    with pytest.raises(errors.HostReadError):
        cpu.online_cpus(cpu_map, info)
