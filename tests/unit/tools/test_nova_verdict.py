"""make test-nova's verdict (tools/novatests/verdict.py): one outcome per
test, table-driven over the attempts a run can produce."""

import pytest

from tools.novatests import verdict as v

PROOF = {"compute_managers": 2, "trackers": 2, "agent_calls": 40, "agent_answers": 40}
SIG = v.compile_signature(r"NoValidHost")
UNUSED = v.TRACKER_UNUSED


def ok(proof=PROOF):
    return v.Attempt("success", "", proof)


def fail(text="Traceback...\nnova.exception.NoValidHost: No valid host was found."):
    return v.Attempt("fail", text, PROOF)


@pytest.mark.parametrize(
    "attempt, signature, outcome",
    [
        (ok(), None, v.PASSED),
        (ok(proof=None), None, v.NOT_INJECTED),
        (ok(proof=dict(PROOF, trackers=1)), None, v.NOT_INJECTED),
        (ok(proof=dict(PROOF, trackers=0, agent_calls=0, agent_answers=0)), None, v.NOT_INJECTED),
        (ok(proof=dict(PROOF, agent_calls=0, agent_answers=0)), None, v.TRACKER_UNUSED),
        (ok(proof=dict(PROOF, compute_managers=0, trackers=0, agent_calls=0)), None, UNUSED),
        (ok(proof=dict(PROOF, compute_managers=0, trackers=1)), None, v.PASSED),
        (ok(proof=dict(PROOF, agent_answers=0)), None, v.NOT_INJECTED),
        (fail(), None, None),  # run again
        (v.Attempt("hung", "hung: no end after 120 s"), None, None),
        (v.Attempt("not run", "not run"), None, None),
        (fail(), SIG, v.LISTED),
        (fail("AssertionError: 3 != 2"), SIG, None),  # listed, failed otherwise: run again
        (ok(), SIG, v.LISTED_PASSES),
        (v.Attempt("hung", "hung: no end after 120 s"), SIG, None),
    ],
)
def test_first_attempt(attempt, signature, outcome):
    assert v.first_pass(attempt, signature) == outcome


@pytest.mark.parametrize(
    "again, signature, flaky_on_stock, stock, outcome",
    [
        # Unlisted: a pass on the rerun is a flake, rtagent's unless the
        # record shows it flaky on stock nova.
        (ok(), None, False, None, v.FLAKY),
        (ok(), None, True, None, v.FLAKY_ON_STOCK),
        (ok(proof=None), None, False, None, v.NOT_INJECTED),
        (fail(), None, False, ok(proof=None), v.UNLISTED),
        (fail(), None, True, ok(proof=None), v.UNLISTED),
        (fail(), None, False, fail(), v.FAILS_ON_STOCK),
        # Listed: the rerun must fail as the entry says.
        (fail(), SIG, False, None, v.LISTED),
        (fail("AssertionError: 3 != 2"), SIG, False, None, v.OTHER_FAILURE),
        (v.Attempt("hung", "hung: no end after 120 s"), SIG, False, None, v.OTHER_FAILURE),
        (ok(), SIG, False, None, v.LISTED_PASSES),
    ],
)
def test_after_the_rerun(again, signature, flaky_on_stock, stock, outcome):
    assert v.after_rerun(again, signature, flaky_on_stock, stock) == outcome


@pytest.mark.parametrize(
    "again, signature, stock, outcome",
    [
        # A test the first run never reached: its run alone is its first.
        (ok(), None, None, v.PASSED),
        (ok(proof=dict(PROOF, agent_calls=0, agent_answers=0)), None, None, UNUSED),
        (ok(proof=None), None, None, v.NOT_INJECTED),
        (fail(), None, ok(proof=None), v.UNLISTED),
        (fail(), SIG, None, v.LISTED),
        (ok(), SIG, None, v.LISTED_PASSES),
    ],
)
def test_after_a_first_run_that_never_reached_it(again, signature, stock, outcome):
    assert v.after_rerun(again, signature, False, stock, first_ran=False) == outcome


def test_a_double_failure_is_not_judged_without_stock_nova():
    with pytest.raises(ValueError):
        v.after_rerun(fail(), None, False, None)
    assert v.needs_stock_run(fail(), None)
    assert not v.needs_stock_run(fail(), SIG)
    assert not v.needs_stock_run(ok(), None)


def test_only_passes_listed_exceptions_and_stock_flakes_are_good():
    bad = {v.NOT_INJECTED, v.FLAKY, v.UNLISTED, v.OTHER_FAILURE, v.LISTED_PASSES, v.FAILS_ON_STOCK}
    assert not bad & v.GOOD


def test_the_figures_add_up_to_the_baseline():
    outcomes = {
        "a": v.PASSED,
        "b": v.PASSED,
        "c": v.LISTED,
        "d": v.NOT_INJECTED,
        "e": v.FLAKY,
        "f": v.FLAKY_ON_STOCK,
        "g": v.UNLISTED,
        "h": v.OTHER_FAILURE,
        "i": v.LISTED_PASSES,
        "j": v.FAILS_ON_STOCK,
        "k": v.TRACKER_UNUSED,
    }
    figures = v.counts(outcomes, expected=set(outcomes))
    assert figures["nova_baseline_passed"] == 11
    assert figures["nova_tracker_unused"] == 1
    assert figures["nova_with_rtagent_passed"] == 3
    assert figures["nova_with_rtagent_failed"] == 5
    assert figures["nova_not_injected"] == 1
    assert figures["nova_flaky_with_rtagent"] == 1
    assert figures["nova_unlisted_failures"] == 2
    assert (
        figures["nova_with_rtagent_passed"]
        + figures["nova_tracker_unused"]
        + figures["nova_with_rtagent_failed"]
        + figures["nova_flaky_with_rtagent"]
        + figures["nova_listed_but_passes"]
        == figures["nova_baseline_passed"]
    )


def test_an_entry_that_names_no_expected_test_is_stale():
    assert v.stale_exceptions({"x", "y"}, {"y": {}}) == ["x"]
