# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The verdict of ``make test-nova``, pure: each test the recorded baseline
expects to pass is given one outcome from what the runs with rtagent showed.

A run with rtagent proves something only where rtagent served it, and only
where a failure is the one docs/nova.md explains, so:

- a pass counts only with the test's proof record (written by rtagent's
  fixture, :mod:`rtagent.nova.testing`) showing that rtagent's tracker
  served every compute manager the test built; otherwise ``not_injected``.
  A test in which rtagent was in place but no tracker was asked anything
  (nova's listing tests build no compute manager; a compute service that
  fails at start-up asks nothing) passes as ``tracker_unused``: it tests
  nothing of a tracker, so it is counted apart;
- a listed test must fail, and fail as its entry's signature says; a listed
  test that passes, or fails otherwise, fails the verdict (the list stays
  exact);
- an unlisted test that fails and then passes when run again is
  ``flaky_with_rtagent`` and fails the verdict: a flake rtagent causes is
  not absorbed by the rerun. Only a test the baseline recorded as flaky on
  stock nova is excused (``flaky_on_stock_nova``, named on its own line).
  A test the first run never reached (``not run``: the run's wall-clock
  limit came first) has not failed: its run alone is its first attempt;
- an unlisted test that fails twice is run on stock nova: if stock nova
  passes it, it is an ``unlisted_failure``; if stock nova fails it too, the
  record no longer holds on this machine (``fails_on_stock_nova``), which
  fails the verdict as well.
"""

import re

PASSED = "passed"
TRACKER_UNUSED = "tracker_unused"
LISTED = "listed_exception"
NOT_INJECTED = "not_injected"
FLAKY = "flaky_with_rtagent"
FLAKY_ON_STOCK = "flaky_on_stock_nova"
UNLISTED = "unlisted_failure"
OTHER_FAILURE = "listed_but_failed_otherwise"
LISTED_PASSES = "listed_but_passes"
FAILS_ON_STOCK = "fails_on_stock_nova"

# Outcomes that let the verdict pass.
GOOD = frozenset({PASSED, TRACKER_UNUSED, LISTED, FLAKY_ON_STOCK})
# Outcomes counted as failed with rtagent (a pass without proof is not a pass).
FAILED = frozenset({LISTED, NOT_INJECTED, UNLISTED, OTHER_FAILURE, FAILS_ON_STOCK})


class Attempt:
    """One run of one test.

    :param status: ``success``, ``fail``, ``hung`` or ``not run``.
    :param text: the failure's text (traceback or reason), '' on success.
    :param proof: the test's proof record (a dict) or None.
    """

    def __init__(self, status, text="", proof=None):
        self.status, self.text, self.proof = status, text, proof

    @property
    def passed(self):
        return self.status == "success"

    def __repr__(self):
        return f"Attempt({self.status!r})"


def injected(proof):
    """(PASSED, '') when a proof record shows rtagent serving the test: each
    compute manager it built had rtagent's tracker, and the agent answered
    that tracker's calls; (TRACKER_UNUSED, why) when rtagent's tracker was
    in place and nothing asked it anything; (NOT_INJECTED, why) otherwise."""
    if proof is None:
        return NOT_INJECTED, "no proof record: rtagent's fixture never ran in this test"
    managers, trackers = proof.get("compute_managers", 0), proof.get("trackers", 0)
    if trackers < managers:
        return NOT_INJECTED, f"{managers} compute managers but {trackers} trackers of rtagent's"
    if proof.get("agent_calls", 0) == 0:
        return TRACKER_UNUSED, f"{managers} compute managers, no call to rtagent's tracker"
    if proof.get("agent_answers", 0) == 0:
        return NOT_INJECTED, "the agent answered none of the tracker's calls"
    return PASSED, ""


def first_pass(attempt, signature):
    """The outcome of a first attempt, or None when the test must run again.

    :param signature: the compiled pattern of the test's docs/nova.md entry,
        or None for a test not listed.
    """
    if signature is not None:
        return _as_listed(attempt, signature)
    if attempt.passed:
        return injected(attempt.proof)[0]
    return None


def _as_listed(attempt, signature):
    """A listed test's outcome: it must fail as its signature says."""
    if attempt.passed:
        return LISTED_PASSES
    if attempt.status == "fail" and signature.search(attempt.text):
        return LISTED
    return None


def after_rerun(again, signature, flaky_on_stock, stock=None, first_ran=True):
    """The outcome of a test whose first attempt :func:`first_pass` left open.

    :param again: the second attempt with rtagent.
    :param first_ran: False when the first run never reached the test:
        ``again`` is then its only run, and a pass is a pass.
    :param flaky_on_stock: the baseline recorded the test as flaky on stock nova.
    :param stock: its attempt on stock nova, needed only when both attempts
        with rtagent failed and the test is not listed.
    """
    if signature is not None:
        return _as_listed(again, signature) or OTHER_FAILURE
    if again.passed:
        outcome = injected(again.proof)[0]
        if outcome == NOT_INJECTED or not first_ran:
            return outcome
        return FLAKY_ON_STOCK if flaky_on_stock else FLAKY
    if stock is None:
        raise ValueError("a test that failed twice with rtagent needs its run on stock nova")
    return UNLISTED if stock.passed else FAILS_ON_STOCK


def needs_stock_run(again, signature):
    """Whether a test that failed once is to be run on stock nova."""
    return signature is None and not again.passed


def stale_exceptions(listed, expected):
    """docs/nova.md entries that name no test the baseline expects to pass
    (the list stays exact)."""
    return sorted(test for test in listed if test not in expected)


def counts(outcomes, expected):
    """The figures ``make test-nova`` prints, from {test id: outcome}."""
    values = list(outcomes.values())
    return {
        "nova_baseline_passed": len(expected),
        "nova_with_rtagent_passed": sum(v in (PASSED, FLAKY_ON_STOCK) for v in values),
        "nova_tracker_unused": values.count(TRACKER_UNUSED),
        "nova_with_rtagent_failed": sum(v in FAILED for v in values),
        "nova_listed_exceptions": values.count(LISTED),
        "nova_unlisted_failures": sum(v in (UNLISTED, OTHER_FAILURE) for v in values),
        "nova_not_injected": values.count(NOT_INJECTED),
        "nova_flaky_with_rtagent": values.count(FLAKY),
        "nova_flaky_on_stock_nova": values.count(FLAKY_ON_STOCK),
        "nova_listed_but_passes": values.count(LISTED_PASSES),
        "nova_fails_on_stock_nova": values.count(FAILS_ON_STOCK),
    }


def compile_signature(pattern):
    """A docs/nova.md signature as a pattern searched in the failure text
    (a traceback's exception line, an assertion's message, ``hung``)."""
    return re.compile(pattern, re.DOTALL)
