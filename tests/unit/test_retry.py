import pytest

from rtagent.placement.retry import RetryPolicy


class Boom(Exception):
    pass


def failing(times):
    """fn(attempt) that raises Boom on its first ``times`` attempts."""
    raised = []

    def fn(attempt):
        if attempt <= times:
            raised.append(Boom(attempt))
            raise raised[-1]
        return f"ok on {attempt}"

    return fn, raised


def test_retries_until_success_with_bounded_jittered_pauses():
    pauses, calls = [], []

    def fn(attempt):
        calls.append(attempt)
        if attempt < 3:
            raise Boom()
        return "ok"

    policy = RetryPolicy(max_attempts=4, base_delay=1.0, max_delay=1.5)
    assert policy.call(fn, Boom, sleep=pauses.append, rng=lambda: 1.0) == "ok"
    assert calls == [1, 2, 3]
    assert pauses == [1.0, 1.5]  # 1 x 2^0, then 2 capped at 1.5


def test_exhaustion_raises_the_mapped_error_chained_from_the_last_one():
    class Exhausted(Exception):
        pass

    fn, raised = failing(times=5)
    seen, pauses = [], []
    with pytest.raises(Exhausted) as caught:
        RetryPolicy(max_attempts=3).call(
            fn,
            Boom,
            on_retry=lambda exc, n: seen.append((exc, n)),
            exhausted=Exhausted,
            sleep=pauses.append,
        )
    assert caught.value.args == (raised[-1], 3)
    assert caught.value.__cause__ is raised[-1]
    # One on_retry per pause, none after the last attempt.
    assert seen == [(raised[0], 1), (raised[1], 2)]
    assert len(pauses) == 2 and len(raised) == 3


def test_exhaustion_without_a_mapping_reraises_the_last_error_itself():
    fn, raised = failing(times=5)
    pauses = []
    with pytest.raises(Boom) as caught:
        RetryPolicy(max_attempts=2).call(fn, Boom, sleep=pauses.append)
    assert caught.value is raised[-1] and len(raised) == 2
    assert len(pauses) == 1


def test_one_attempt_never_pauses():
    fn, raised = failing(times=1)
    pauses, seen = [], []
    with pytest.raises(Boom):
        RetryPolicy(max_attempts=1).call(
            fn, Boom, on_retry=lambda exc, n: seen.append(n), sleep=pauses.append
        )
    assert pauses == [] and seen == [] and len(raised) == 1


def test_other_errors_are_not_retried():
    calls = []

    def fn(attempt):
        calls.append(attempt)
        raise KeyError("x")

    with pytest.raises(KeyError):
        RetryPolicy().call(fn, (Boom, ValueError), sleep=lambda s: None)
    assert calls == [1]


def test_jitter_is_within_bounds():
    policy = RetryPolicy(base_delay=0.2, max_delay=5.0)
    assert policy.delay(1, rng=lambda: 0.0) == 0.0
    assert policy.delay(4, rng=lambda: 0.999) < 1.6


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.999])
def test_pauses_are_full_jitter_under_the_doubling_capped_bound(draw):
    # uniform(0, min(cap, base x 2^(n-1))) after attempt n, the random draw
    # scaling the bound: tenacity's wait_random_exponential, rng injected.
    policy = RetryPolicy(max_attempts=8, base_delay=0.2, max_delay=5.0)
    fn, _ = failing(times=7)
    pauses = []
    assert policy.call(fn, Boom, sleep=pauses.append, rng=lambda: draw) == "ok on 8"
    bounds = [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert pauses == pytest.approx([draw * b for b in bounds])
    assert [policy.delay(n, rng=lambda: draw) for n in range(1, 8)] == pauses


def test_a_huge_attempt_number_pauses_the_cap():
    assert RetryPolicy(base_delay=0.2, max_delay=5.0).delay(2000, rng=lambda: 1.0) == 5.0


def test_a_zero_base_retries_at_once():
    fn, _ = failing(times=1)
    pauses = []
    RetryPolicy(max_attempts=2, base_delay=0).call(fn, Boom, sleep=pauses.append)
    assert pauses == [0]


@pytest.mark.parametrize("kwargs", [dict(max_attempts=0), dict(base_delay=-1)])
def test_invalid_policy(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
