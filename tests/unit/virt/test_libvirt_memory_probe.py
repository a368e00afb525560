"""Memory probe over canned getInfo results."""

import pytest

from rtagent.virt import errors
from rtagent.virt.libvirt.probes import memory


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (["x86_64", 4186, 2, 2596, 1, 1, 2, 1], 4186),  # a real QEMU host (a VM)
        (["x86_64", 32768, 16, 2400, 1, 2, 4, 2], 32768),  # etc/rtagent/demo-host.xml
        (["i686", 3072, 16, 1400, 2, 2, 2, 2], 3072),  # test:///default
    ],
)
def test_memory_mb(info, expected):
    assert memory.memory_mb(info) == expected


@pytest.mark.parametrize("info", [None, [], ["x86_64"], ["x86_64", 0, 2], ["x86_64", "x", 2]])
def test_unusable_info_raises(info):
    with pytest.raises(errors.HostReadError):
        memory.memory_mb(info)
