"""The rule that adds to a consumer's allocation the devices a scheduler
left out of it (pure)."""

import pytest

from rtagent.placement.passes.pci_devices import healed, missing, with_dropped

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
        # a device given back: its class leaves the provider, and the
        # provider the allocation when nothing else is on it
        ({ROOT: FLAVOR, NIC: {"VF": 2}}, {NIC: {"VF": 1}}, {ROOT: FLAVOR, NIC: {"VF": 1}}),
        (
            {ROOT: FLAVOR, NIC: {"VF": 1, "OTHER": 1}},
            {NIC: {"VF": 0}},
            {ROOT: FLAVOR, NIC: {"OTHER": 1}},
        ),
        ({ROOT: FLAVOR, GPU: {"T4": 1}}, {GPU: {"T4": 0}}, {ROOT: FLAVOR}),
        ({ROOT: FLAVOR}, {GPU: {"T4": 0}}, None),
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


def test_with_dropped_asks_zero_of_what_was_held_and_is_not_now():
    before = {NIC: {"VF": 2}, GPU: {"T4": 1}}
    assert with_dropped({NIC: {"VF": 1}}, before) == {NIC: {"VF": 1}, GPU: {"T4": 0}}
    assert with_dropped({}, before) == {NIC: {"VF": 0}, GPU: {"T4": 0}}
    assert with_dropped({NIC: {"VF": 1}}, {}) == {NIC: {"VF": 1}}
