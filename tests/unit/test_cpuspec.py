"""nova's CPU list syntax: what it selects, and what it refuses before
expanding anything."""

import pytest

from rtagent import cpuspec


@pytest.mark.parametrize(
    "spec, cpus",
    [
        ("0", {0}),
        ("0-3", {0, 1, 2, 3}),
        ("0-3,^2", {0, 1, 3}),
        (" 0 - 2 , 8 ", {0, 1, 2, 8}),
        ("0-3,^0-3", set()),
        ("16383", {16383}),
    ],
)
def test_what_a_spec_selects(spec, cpus):
    assert cpuspec.parse(spec) == cpus


@pytest.mark.parametrize(
    "spec, message",
    [
        ("x", "bad item 'x'"),
        ("-1", "bad item '-1'"),
        ("1_000", "bad item '1_000'"),
        ("\u0663", "bad item"),  # ARABIC-INDIC DIGIT THREE: int() takes it
        ("3-1", "bad range '3-1'"),
        ("16384", "CPU id 16384 in '16384' is above 16383"),
        ("0-9999999999", "CPU id 9999999999 in '0-9999999999' is above 16383"),
        ("^0-99999999999999999999", "is above 16383"),
    ],
)
def test_what_a_spec_refuses(spec, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        cpuspec.parse(spec)
