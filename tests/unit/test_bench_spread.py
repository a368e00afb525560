"""The benchmarks' spread rule (benchmarks/common/spread.py): interleaved
rounds, the median's confidence interval, PASS / MISS / VOID."""

import itertools

import pytest

from benchmarks.common import spread


def test_rounds_alternate_order_and_pair_up():
    calls = []
    clock = itertools.count()
    samples = spread.interleaved(
        [lambda: calls.append("a"), lambda: calls.append("b")],
        3,
        clock=lambda: next(clock),
        warmup=1,
    )
    assert calls == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert [len(s) for s in samples] == [3, 3]
    assert spread.ratios([2.0, 4.0, 1.0], [1.0, 2.0, 0.0]) == [2.0, 2.0]


@pytest.mark.parametrize(
    ("n", "ranks"),
    [(5, (1, 5)), (10, (2, 9)), (20, (6, 15)), (30, (10, 21)), (100, (40, 61))],
)
def test_median_interval_is_the_binomial_order_statistics(n, ranks):
    assert spread.median_interval(range(1, n + 1)) == ranks


def test_large_samples_use_the_normal_approximation():
    lo, hi = spread.median_interval(range(1, 2001))
    assert 950 < lo < 1000 < hi < 1050


def judged(values, target=2.0, **kwargs):
    return spread.judge("g", values, target, **kwargs).verdict


def test_tight_spreads_are_judged_by_the_median():
    assert judged([1.8, 1.85, 1.9] * 10) == "PASS"
    assert judged([2.3, 2.35, 2.4] * 10) == "MISS"


def test_a_spread_straddling_the_target_beyond_the_margin_is_void():
    assert judged([1.0, 1.9, 3.0] * 10) == "VOID"
    assert judged([1.0, 2.1, 3.0] * 10) == "VOID"
    # Within the margin on the far side: the median decides.
    assert judged([1.9, 1.95, 2.15] * 10) == "PASS"
    assert judged([1.85, 2.1, 2.2] * 10) == "MISS"


def test_a_spread_wholly_above_the_target_is_a_miss_however_wide():
    assert judged([2.01, 5.0, 40.0] * 10) == "MISS"


def test_at_least_mirrors_the_rule():
    assert judged([1.0] * 10, target=1.0, at_least=True) == "PASS"
    assert judged([0.5] * 10, target=1.0, at_least=True) == "MISS"
    assert judged([0.2, 0.95, 1.8] * 10, target=1.0, at_least=True) == "VOID"


def test_nothing_measured_is_void_and_miss_wins_when_combined():
    nothing = spread.judge("g", [], 2.0)
    assert nothing.verdict == "VOID" and nothing.reps == 0
    assert spread.combine(["PASS", "VOID", "MISS"]) == "MISS"
    assert spread.combine(["PASS", "VOID"]) == "VOID"
    assert spread.combine(["PASS"]) == "PASS"
    assert spread.combine([]) == "VOID"


def test_fields_print_median_spread_and_reps():
    j = spread.judge("ratio", [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6], 2.0)
    assert j.fields() == "ratio=1.30 ratio_spread=1.00..1.60 ratio_reps=7"
    assert j.line().endswith("target<=2 verdict=PASS")
