import pytest

from rtagent.placement.retry import RetryPolicy


class Boom(Exception):
    pass


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


def test_exhaustion_raises_the_mapped_error():
    class Exhausted(Exception):
        pass

    seen = []
    with pytest.raises(Exhausted):
        RetryPolicy(max_attempts=3).call(
            lambda n: (_ for _ in ()).throw(Boom()),
            Boom,
            on_retry=lambda exc, n: seen.append(n),
            exhausted=lambda exc, n: Exhausted(n),
            sleep=lambda s: None,
        )
    assert seen == [1, 2]


def test_other_errors_are_not_retried():
    calls = []

    def fn(attempt):
        calls.append(attempt)
        raise KeyError("x")

    with pytest.raises(KeyError):
        RetryPolicy().call(fn, Boom, sleep=lambda s: None)
    assert calls == [1]


def test_jitter_is_within_bounds():
    policy = RetryPolicy(base_delay=0.2, max_delay=5.0)
    assert policy.delay(1, rng=lambda: 0.0) == 0.0
    assert policy.delay(4, rng=lambda: 0.999) < 1.6


@pytest.mark.parametrize("kwargs", [dict(max_attempts=0), dict(base_delay=-1)])
def test_invalid_policy(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
