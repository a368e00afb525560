"""The recorded baseline of make test-nova (tools/novatests/record.py)."""

import json
import os

import pytest

from tools.novatests import record

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
KEY = {"nova": "34.0.0", "python": "3.11", "constraints_sha256": "c", "selection_sha256": "s"}
TESTS = {
    "a": {"status": "success", "seconds": 3.0},
    "b": {"status": "flaky", "seconds": 9.0},
    "c": {"status": "fail", "seconds": 1.0},
    "d": {"status": "skip", "seconds": 0.0},
}


def test_expected_tests_are_those_stock_nova_passed():
    rec = {"key": KEY, "tests": TESTS}
    assert set(record.expected(rec)) == {"a", "b"}
    assert set(record.expected(rec, {"a", "c"})) == {"a"}
    assert record.flaky_on_stock(rec) == {"b"}


def test_a_record_that_holds_has_no_mismatch():
    ids = sorted(TESTS)
    key = dict(KEY, selection_sha256=record.selection_digest(ids))
    assert record.mismatch({"key": key, "tests": TESTS}, key, ids) == ""


@pytest.mark.parametrize(
    "change, says",
    [
        ({"nova": "35.0.0"}, "nova 34.0.0 recorded, 35.0.0 here"),
        ({"python": "3.12"}, "python 3.11 recorded, 3.12 here"),
        ({"constraints_sha256": "other"}, "constraints_sha256 c recorded, other here"),
    ],
)
def test_each_part_of_the_key_is_named(change, says):
    ids = sorted(TESTS)
    key = dict(KEY, selection_sha256=record.selection_digest(ids))
    assert says in record.mismatch({"key": key, "tests": TESTS}, dict(key, **change), ids)


def test_a_changed_selection_says_what_changed():
    old = dict(KEY, selection_sha256=record.selection_digest(sorted(TESTS)))
    ids = ["a", "b", "c", "d", "e"]
    why = record.mismatch(
        {"key": old, "tests": TESTS}, dict(KEY, selection_sha256=record.selection_digest(ids)), ids
    )
    assert why == "selected tests differ: 1 added, 0 removed (e.g. e)"


def test_a_test_flaky_once_stays_flaky_for_that_nova(tmp_path):
    path = str(tmp_path / "baseline.json")
    previous = {"key": KEY, "tests": TESTS}
    record.write(
        path,
        KEY,
        "regex",
        {"a": {"status": "success", "seconds": 1.0}, "b": {"status": "success", "seconds": 2.0}},
        previous,
    )
    written = record.load(path)
    assert (
        written["tests"]["b"]["status"] == "flaky" and written["tests"]["a"]["status"] == "success"
    )
    record.write(
        path,
        dict(KEY, nova="35.0.0"),
        "regex",
        {"b": {"status": "success", "seconds": 2.0}},
        previous,
    )
    assert record.load(path)["tests"]["b"]["status"] == "success"


@pytest.mark.parametrize("content", ["", "[]", '{"key": {}}', "not json"])
def test_what_is_not_a_record_is_refused(tmp_path, content):
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(record.RecordError):
        record.load(str(path))


def test_a_missing_record_is_named():
    with pytest.raises(record.RecordError, match="no recorded baseline"):
        record.load("/nonexistent/baseline.json")


def test_a_package_at_another_version_than_pinned_is_named(tmp_path):
    pins = tmp_path / "constraints.txt"
    pins.write_text("pytest==0.0.1\n")
    with pytest.raises(record.RecordError, match=r"pytest \S+ \(pinned 0\.0\.1\)"):
        record.environment_key(str(pins), [])


def test_the_repository_record_is_keyed_by_its_constraints():
    with open(os.path.join(ROOT, "tools", "nova-baseline.json")) as f:
        rec = json.load(f)
    import hashlib

    with open(os.path.join(ROOT, "tools", "nova-constraints.txt"), "rb") as f:
        assert rec["key"]["constraints_sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert rec["key"]["selection_sha256"] == record.selection_digest(rec["tests"])
    assert sum(e["status"] in record.EXPECTED for e in rec["tests"].values()) >= 430
