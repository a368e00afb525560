"""Dedicated CPUs of pinned domains that no claim of theirs keeps (pure)."""

import dataclasses

from rtagent.numa import running_pins
from rtagent.numa.model import HostCell


@dataclasses.dataclass(frozen=True)
class Dom:
    uuid: str
    pinned_cpus: frozenset = frozenset()


CELLS = (
    HostCell(0, cpuset=frozenset({0}), pcpuset=frozenset({1, 2, 3}), memory_mb=1024),
    HostCell(1, cpuset=frozenset({4}), pcpuset=frozenset({5, 6, 7}), memory_mb=1024),
)


def test_only_dedicated_cpus_of_pinned_domains_count():
    doms = [Dom("a", frozenset({0, 1})), Dom("b", frozenset({4})), Dom("c"), Dom("d", {6, 7})]
    assert running_pins.pinned_dedicated(doms, CELLS) == {"a": {1}, "d": {6, 7}}
    no_dedicated = tuple(dataclasses.replace(c, pcpuset=frozenset()) for c in CELLS)
    assert running_pins.pinned_dedicated(doms, no_dedicated) == {}


def test_unclaimed_is_what_the_domains_own_claims_do_not_keep():
    pinned = {"a": frozenset({1, 2}), "b": frozenset({6})}
    kept = {"a": frozenset({1})}
    assert running_pins.unclaimed(pinned, lambda u: kept.get(u, frozenset())) == {
        "a": (2,),
        "b": (6,),
    }
    kept = {"a": frozenset({1, 2}), "b": frozenset({6, 7})}
    assert running_pins.unclaimed(pinned, lambda u: kept.get(u, frozenset())) == {}


def test_a_claim_may_not_pin_others_unclaimed_cpus_and_keeps_its_own():
    unclaimed = {"a": (2,), "b": (6,)}
    cells = running_pins.for_claim(CELLS, unclaimed, "x")
    assert [c.free_pcpus for c in cells] == [{1, 3}, {5, 7}]
    # The domain's own CPUs are not held against it...
    cells = running_pins.for_claim(CELLS, unclaimed, "a")
    assert [c.free_pcpus for c in cells] == [{1, 2, 3}, {5, 7}]
    # ...and with its running pins, those are the only ones it may keep.
    cells = running_pins.for_claim(CELLS, unclaimed, "a", own=frozenset({2}))
    assert [c.free_pcpus for c in cells] == [{2}, set()]
    # Nothing to hold: the very cells, unchanged.
    assert running_pins.for_claim(CELLS, {}, "x") is CELLS
