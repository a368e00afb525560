"""The rule that adds to a consumer's allocation the devices a scheduler
left out of it (pure)."""

import pytest

from rtagent.placement.pcialloc import healed, missing

ROOT, NIC, GPU = "root", "nic", "gpu"
FLAVOR = {"VCPU": 1, "MEMORY_MB": 512}


@pytest.mark.parametrize(
    ("current", "wanted", "expected"),
    [
        # the scheduler allocated the flavor only: the devices are added
        ({ROOT: FLAVOR}, {NIC: {"VF": 2}}, {ROOT: FLAVOR, NIC: {"VF": 2}}),
        # already right: nothing to write
        ({ROOT: FLAVOR, NIC: {"VF": 2}}, {NIC: {"VF": 2}}, None),
        # a different amount on the provider is set to the claim's
        ({ROOT: FLAVOR, NIC: {"VF": 1}}, {NIC: {"VF": 2}}, {ROOT: FLAVOR, NIC: {"VF": 2}}),
        ({ROOT: FLAVOR, NIC: {"VF": 3}}, {NIC: {"VF": 2}}, {ROOT: FLAVOR, NIC: {"VF": 2}}),
        # other classes on the provider, and other providers, stay
        (
            {ROOT: FLAVOR, NIC: {"OTHER": 1}, "elsewhere": {"X": 1}},
            {NIC: {"VF": 1}, GPU: {"T4": 1}},
            {ROOT: FLAVOR, NIC: {"OTHER": 1, "VF": 1}, GPU: {"T4": 1}, "elsewhere": {"X": 1}},
        ),
        # nothing on the node's root: not placed here, left alone
        ({}, {NIC: {"VF": 1}}, None),
        ({"elsewhere": FLAVOR}, {NIC: {"VF": 1}}, None),
    ],
)
def test_healed(current, wanted, expected):
    before = {rp: dict(r) for rp, r in current.items()}
    assert healed(current, ROOT, wanted) == expected
    assert current == before  # the input is not changed


def test_missing_is_true_when_any_amount_differs():
    assert missing({NIC: {"VF": 1}}, {NIC: {"VF": 2}})
    assert missing({}, {GPU: {"T4": 1}})
    assert not missing({NIC: {"VF": 2, "OTHER": 1}}, {NIC: {"VF": 2}})
