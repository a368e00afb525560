"""The rule that tells a legacy pinned allocation (vCPUs as VCPU) from
anything else, and the move it makes (pure)."""

import pytest

from rtagent.placement.passes.pinned_vcpus import correction, moved

LEFT_ALONE = "left alone"


@pytest.mark.parametrize(
    ("claimed", "held", "expected"),
    [
        # nova's legacy pinning: every pinned vCPU as VCPU
        ({"PCPU": 4, "MEMORY_MB": 1}, {"VCPU": 4, "MEMORY_MB": 1}, 4),
        # a mixed guest: 2 shared and 2 pinned, all 4 as VCPU
        ({"VCPU": 2, "PCPU": 2}, {"VCPU": 4}, 2),
        # already right, or no allocation here: nothing to do
        ({"PCPU": 4}, {"PCPU": 4}, 0),
        ({"PCPU": 4}, None, 0),
        ({"PCPU": 4}, {}, 0),
        # not pinned at all
        ({"VCPU": 4}, {"VCPU": 4}, 0),
        # more PCPU than the claim: not ours to shrink
        ({"PCPU": 2}, {"PCPU": 4}, 0),
        # vCPU totals that differ from the claim's: someone else's decision
        ({"PCPU": 2}, {"VCPU": 3}, LEFT_ALONE),
        ({"PCPU": 4}, {"VCPU": 2}, LEFT_ALONE),
        ({"VCPU": 2, "PCPU": 2}, {"VCPU": 2}, LEFT_ALONE),
        # half moved already (a PCPU part and a VCPU rest): the rest moves
        ({"PCPU": 4}, {"PCPU": 1, "VCPU": 3}, 3),
    ],
)
def test_correction(claimed, held, expected):
    amount, reason = correction(claimed, held)
    if expected == LEFT_ALONE:
        assert amount == 0 and "Placement holds" in reason
    else:
        assert (amount, reason) == (expected, None)


def test_moved_counts_the_amount_as_pcpu_on_the_root_only():
    before = {"root": {"VCPU": 4, "MEMORY_MB": 512}, "other": {"VCPU": 1}}
    after = moved(before, "root", 4)
    assert after == {"root": {"PCPU": 4, "MEMORY_MB": 512}, "other": {"VCPU": 1}}
    assert before["root"] == {"VCPU": 4, "MEMORY_MB": 512}  # inputs untouched
    assert moved({"root": {"VCPU": 3}}, "root", 2) == {"root": {"VCPU": 1, "PCPU": 2}}
