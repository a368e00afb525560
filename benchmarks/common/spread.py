# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Gates whose verdict does not flip with the machine's load.

A ratio gate (subject / same-run baseline <= target) is judged here from
*repetitions*: the subject and its baseline run in turn, A B A B ... (the
order swapped every other round, B A), so that a stretch of a busier
machine falls on both sides of the same repetition; each repetition gives
one ratio, and the gate judges the median of those ratios. Its *spread* is
the distribution-free 95% confidence interval of that median: the order
statistics ``x(k) .. x(n-k+1)`` of the n sorted ratios, k the largest with
``P(Binomial(n, 1/2) < k) <= 2.5%`` (about p25..p75 at 20 repetitions,
p40..p60 at 100; min..max below 6 repetitions, where no such k exists).
More repetitions narrow it; a busier machine widens it.

The rule (:func:`judge`), for a gate ``value <= target`` and a margin m
(default 10% of the target):

- PASS: the median is at most the target and the spread's top at most
  ``target * (1 + m)``;
- MISS: the median is above the target and the spread's bottom at least
  ``target * (1 - m)`` (so a spread wholly above the target is always a
  MISS: a VOID never hides a regression that the whole spread shows);
- VOID otherwise: the spread straddles the target by more than the margin,
  the measurement cannot tell (too busy a machine, or too few repetitions).

For a gate ``value >= target`` (``at_least=True``) the same with the sides
swapped. Each script prints, per gate, ``<gate>=<median>``,
``<gate>_spread=<lo>..<hi>`` and ``<gate>_reps=<n>`` (:meth:`Judged.fields`).

The API (stable; other scripts build on it):

- :func:`interleaved` runs callables in turn and returns their per-round
  samples (CPU time by default);
- :func:`ratios` pairs two such sample lists into per-round ratios;
- :func:`judge` turns per-round values into a :class:`Judged` (median,
  spread, verdict);
- :func:`combine` folds several verdicts into one (any VOID or MISS wins,
  MISS first).
"""

import dataclasses
import math
import statistics
import time

PASS, MISS, VOID = "PASS", "MISS", "VOID"
MARGIN = 0.1
CONFIDENCE = 0.95


def interleaved(fns, reps, clock=time.process_time, warmup=1):
    """Run each of ``fns`` once per round, ``reps`` rounds, in turn.

    Odd rounds run them in reverse order (A B, B A, A B ...) so that neither
    always runs first (a cache warmed by the other, a slice of the CPU
    ending). ``warmup`` rounds run first, unrecorded.

    :param fns: callables taking no argument.
    :param reps: recorded rounds.
    :param clock: the clock read around each call; ``time.process_time``
        (this process's CPU, every thread) by default, ``time.thread_time``
        for the calling thread only, ``time.perf_counter`` for wall time.
    :returns: one list of ``reps`` durations (in the clock's unit) per
        callable, in the order of ``fns``; the i-th entries of the lists
        are the same round's.
    """
    samples = [[] for _ in fns]
    order = list(range(len(fns)))
    for rnd in range(warmup + reps):
        turn = order if rnd % 2 == 0 else order[::-1]
        for index in turn:
            started = clock()
            fns[index]()
            spent = clock() - started
            if rnd >= warmup:
                samples[index].append(spent)
    return samples


def ratios(subject, baseline):
    """Per-round ``subject[i] / baseline[i]``; a round whose baseline is
    not positive is dropped (nothing measured)."""
    return [s / b for s, b in zip(subject, baseline, strict=True) if b > 0]


def median_interval(values, confidence=CONFIDENCE):
    """(lo, hi): the distribution-free confidence interval of the median of
    ``values`` (order statistics, see the module docstring); (min, max)
    when there are too few values for one."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        raise ValueError("no values")
    alpha = (1.0 - confidence) / 2.0
    if n > 300:
        # The normal approximation of the binomial, exact enough here.
        z = statistics.NormalDist().inv_cdf(1.0 - alpha)
        k = max(0, math.floor(n / 2.0 - z * math.sqrt(n) / 2.0))
    else:
        # Largest k (1-based) with P(Binomial(n, 1/2) <= k - 1) <= alpha.
        k, cumulative, whole = 0, 0, 2**n
        for j in range(n + 1):
            cumulative += math.comb(n, j)
            if cumulative > alpha * whole:
                break
            k = j + 1
    if k == 0:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


@dataclasses.dataclass(frozen=True)
class Judged:
    """One gate's figures and verdict."""

    name: str
    value: float  # the median of the per-round values
    lo: float  # the spread (the median's confidence interval)
    hi: float
    reps: int
    target: float
    margin: float
    at_least: bool
    verdict: str  # PASS, MISS or VOID

    def fields(self, digits=2):
        """``name=V name_spread=LO..HI name_reps=N`` (V the median)."""
        f = f"{{:.{digits}f}}"
        return (
            f"{self.name}={f.format(self.value)} "
            f"{self.name}_spread={f.format(self.lo)}..{f.format(self.hi)} "
            f"{self.name}_reps={self.reps}"
        )

    def line(self, digits=2):
        """:meth:`fields`, the target and the verdict: one printable line."""
        sign = ">=" if self.at_least else "<="
        return f"{self.fields(digits)} target{sign}{self.target:g} verdict={self.verdict}"


def decide(value, lo, hi, target, margin=MARGIN, at_least=False):
    """PASS, MISS or VOID for a median ``value`` with spread ``lo..hi``
    (the rule of the module docstring)."""
    if at_least:
        # value >= target: mirror it into the <= rule.
        return decide(-value, -hi, -lo, -target, margin, at_least=False)
    slack = abs(target) * margin
    if value <= target:
        return PASS if hi <= target + slack else VOID
    return MISS if lo >= target - slack else VOID


def judge(name, values, target, margin=MARGIN, at_least=False, confidence=CONFIDENCE):
    """Judge per-round ``values`` (e.g. :func:`ratios`) against ``target``.

    :param name: the gate's name, as printed.
    :param values: one value per repetition; empty is VOID.
    :param target: the bound: ``median <= target`` (``>=`` with
        ``at_least``).
    :param margin: how far (a fraction of the target) the spread may
        reach past the target on the far side and still be judged.
    :returns: a :class:`Judged`.
    """
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        nan = float("nan")
        return Judged(name, nan, nan, nan, 0, target, margin, at_least, VOID)
    lo, hi = median_interval(values, confidence)
    value = statistics.median(values)
    verdict = decide(value, lo, hi, target, margin, at_least)
    return Judged(name, value, lo, hi, len(values), target, margin, at_least, verdict)


def combine(verdicts):
    """One verdict from several: MISS if any is MISS, else VOID if any is
    VOID, else PASS (an empty list is VOID)."""
    verdicts = list(verdicts)
    if not verdicts:
        return VOID
    if MISS in verdicts:
        return MISS
    return VOID if VOID in verdicts else PASS
