# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The rule every holding follows (rtagent.pci.holding) and the one form of
a PCI address (rtagent.pci.address), table-driven."""

import pytest

from rtagent.pci import address, errors, holding

PF, VF0, VF1, GPU = "0000:3b:00.0", "0000:3b:02.0", "0000:3b:02.1", "0000:af:00.0"


@pytest.mark.parametrize(
    "holds, says",
    [
        ([], None),
        ([("a", VF0, PF), ("a", VF1, PF), ("b", GPU, None)], None),
        (
            [("a", GPU, None), ("b", GPU, None)],
            f"PCI device {GPU} is held by two instances, a and b",
        ),
        ([("a", VF0, PF), ("a", VF0, PF)], f"PCI device {VF0} is held twice by instance a"),
        (
            [("a", PF, None), ("a", VF1, PF)],
            f"PF {PF} is held beside its own VF {VF1} by instance a",
        ),
        ([("b", VF1, PF), ("a", PF, None)], f"PF {PF} (a) is held beside its VF {VF1} (b)"),
        # A VF whose PF is not held (or not tracked) is fine.
        ([("a", VF0, "0000:3c:00.0")], None),
    ],
)
def test_clash(holds, says):
    assert holding.clash(holds) == says


@pytest.mark.parametrize(
    "text, form",
    [
        ("0000:3b:02.0", "0000:3b:02.0"),
        ("0000:3B:02.0", "0000:3b:02.0"),
        ("ABCD:EF:1F.7", "abcd:ef:1f.7"),
    ],
)
def test_canonical(text, form):
    assert address.canonical(text) == form


@pytest.mark.parametrize(
    "text", ["3b:02.0", "0000:3b:02.8", "0000:3b:02.0\n", " 0000:3b:02.0", 7, None]
)
def test_not_an_address_is_a_typed_error(text):
    with pytest.raises(errors.InvalidRequest) as caught:
        address.canonical(text, field="running_devices.r.0")
    assert caught.value.field == "running_devices.r.0"


def test_from_parts_is_the_one_form():
    assert address.from_parts(0, 0x3B, 2, 1) == "0000:3b:02.1"
