"""The raw RPC message guard (rtagent.rpc.server) on hostile JSON text."""

import json
import time

import pytest

from rtagent.rpc import server, transport


@pytest.fixture(scope="module")
def original():
    transport.messaging()
    from oslo_messaging._drivers import common

    return common.deserialize_msg


def test_an_unterminated_string_of_escapes_costs_linear_time(original):
    """32,000 escaped quotes and no closing quote: 24 s in the guard's
    first tokenizer (a backtracking regex), while the driver's only consumer
    thread waited. Refused as undecodable, at once."""
    raw = '{"method":"get_status","args":{"x":"' + '\\"' * 32000
    # This thread's CPU time, which other processes do not stretch (the
    # backtracking was CPU too).
    started = time.thread_time()
    with pytest.raises(ValueError):
        server._guarded({"oslo.version": "2.0", "oslo.message": raw}, original)
    # A bound far above what it takes (0.5 ms measured), far below what it
    # took.
    assert time.thread_time() - started < 2.0


def test_only_depth_and_long_integers_are_decoded_again(original):
    deep = '{"method":"ping","args":{"a":' + "[" * 3000 + "]" * 3000 + "}}"
    message = server._guarded({"oslo.version": "2.0", "oslo.message": deep}, original)
    assert message["method"] == "ping"
    with pytest.raises(ValueError):  # not JSON: dropped as oslo.messaging does
        server._guarded({"oslo.version": "2.0", "oslo.message": "{nope"}, original)


@pytest.mark.parametrize(
    "text, cut",
    [
        ('{"a":"[\\"{","b":[[1]]}', '{"a":"[\\"{","b":null}'),
        ('{"a":"\\\\","b":[[1]]}', '{"a":"\\\\","b":null}'),
        ('{"a":[1],"b":"]]"}', '{"a":null,"b":"]]"}'),
    ],
)
def test_brackets_in_strings_and_escapes_do_not_count(text, cut):
    assert server._cut_deeper_than(text, 1) == cut
    json.loads(cut)
