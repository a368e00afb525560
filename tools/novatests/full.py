# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The whole-tree record (make test-nova-full), pure but for reading and
writing its files: one JSON file per part under tools/nova-full/, and the
summary of the whole tree read from those files alone.

A part's file holds its stamp (nova's version, Python's, the constraints'
digest, the commit it ran at and the git tree of ``rtagent/`` there), the
tree it was cut from (how many ids, their digest) and, per test, stock
nova's status and seconds (with why for a test stock nova does not pass)
and, for a test stock nova passes, rtagent's outcome
(tools/novatests/verdict.py) and why.
"""

import json
import os
import re

from . import parts, verdict

STOCK_PASSES = ("success", "flaky")
_NAME = re.compile(r"^part-(\d+)-of-(\d+)\.json$")
# The summary's figures, in the order printed.
FIGURES = (
    "full_tests",
    "full_recorded",
    "full_stock_passed",
    "full_stock_failed",
    "full_stock_skipped",
    "full_rtagent_passed",
    "full_tracker_unused",
    "full_listed",
    "full_unlisted",
    "full_listed_but_passes",
    "full_fails_on_stock",
    "full_flaky",
    "full_flaky_on_stock",
    "full_not_injected",
    "full_parts",
    "full_parts_stale",
    "full_parts_missing",
    "full_parts_partial",
)


class FullRecordError(Exception):
    """A part's file is unreadable, or the parts are not of one split."""


def file_name(k, n):
    return f"part-{k:02d}-of-{n:02d}.json"


def entry(stock_status, stock_seconds, stock_why, outcome=None, why=""):
    """One test's line in a part: stock nova's result, and rtagent's outcome
    (None for a test stock nova does not pass: it is not run with rtagent)."""
    line = {"stock": stock_status, "stock_seconds": round(stock_seconds, 1)}
    if stock_status not in STOCK_PASSES or stock_why:
        line["stock_why"] = stock_why
    line["rtagent"] = outcome
    if why:
        line["why"] = why
    return line


def part(k, n, *, key, code, tree_ids, share, tests, restricted=False):
    """A part's record.

    :param key: {"nova", "python", "constraints_sha256"} (record.environment_key).
    :param code: the stamp of the code (stamp.read).
    :param tree_ids: every id of the tree the part was cut from.
    :param share: the ids of part k of the split.
    :param tests: {test id: :func:`entry`} of the tests run (all of
        ``share``, or the few ``restricted`` to).
    """
    return {
        "part": k,
        "parts": n,
        "stamp": {
            "nova": key["nova"],
            "python": key["python"],
            "constraints_sha256": key["constraints_sha256"],
            **code,
        },
        "tree": {"tests": len(tree_ids), "sha256": parts.digest(tree_ids)},
        "share": {"tests": len(share), "sha256": parts.digest(share)},
        "restricted": restricted,
        "tests": dict(sorted(tests.items())),
    }


def write(directory, record):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, file_name(record["part"], record["parts"]))
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(f"{path}.tmp", path)
    return path


def load_all(directory):
    """[record] of every part file in ``directory`` (none if it is missing).

    :raises FullRecordError: a file that is not a part's record, or one
        whose name and content disagree.
    """
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    records = []
    for name in names:
        match = _NAME.match(name)
        if not match:
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
        except (OSError, ValueError) as e:
            raise FullRecordError(f"{path}: {e}") from None
        if not isinstance(record, dict) or not {"part", "parts", "stamp", "tree", "tests"} <= set(
            record
        ):
            raise FullRecordError(f"{path}: not a part's record")
        if (record["part"], record["parts"]) != (int(match.group(1)), int(match.group(2))):
            raise FullRecordError(f"{path}: holds part {record['part']}/{record['parts']}")
        records.append(record)
    return records


def stale_reasons(record, head_tree, constraints_sha256):
    """Why a part no longer holds for the code and environment at HEAD, or []."""
    stamp, why = record["stamp"], []
    if stamp.get("rtagent_dirty"):
        why.append("ran with uncommitted changes under rtagent/")
    if stamp.get("rtagent_tree") != head_tree:
        why.append(f"rtagent/ at {str(stamp.get('commit'))[:12]} differs from rtagent/ at HEAD")
    if stamp.get("constraints_sha256") != constraints_sha256:
        why.append("tools/nova-constraints.txt changed since")
    return why


def summarize(records, head_tree, constraints_sha256, listed, default_parts):
    """(figures, problems) of the whole tree from its parts' records.

    :param listed: the test ids docs/nova.md lists now: a test recorded as a
        listed exception that is no longer listed counts as unlisted.
    :param default_parts: the number of parts when none is recorded.
    :raises FullRecordError: parts of different splits or trees.
    :returns: figures in :data:`FIGURES` order, and one line per problem
        (each makes the summary fail).
    """
    splits = {(r["parts"], r["tree"]["sha256"], r["tree"]["tests"]) for r in records}
    if len(splits) > 1:
        raise FullRecordError(
            "the kept parts are of different splits or trees: "
            + ", ".join(f"{n} parts of {count} tests" for n, _, count in sorted(splits))
        )
    n, _, tree_count = next(iter(splits), (default_parts, "", 0))
    problems = []
    lines = {}
    stale = partial = 0
    for record in records:
        label = f"part {record['part']}/{record['parts']}"
        why = stale_reasons(record, head_tree, constraints_sha256)
        if why:
            stale += 1
            problems.append(f"stale {label}: {'; '.join(why)}")
        if record.get("restricted") or len(record["tests"]) != record["share"]["tests"]:
            partial += 1
            problems.append(
                f"partial {label}: {len(record['tests'])} of its {record['share']['tests']} tests"
            )
        for test, line in record["tests"].items():
            if test in lines:
                raise FullRecordError(f"{test} is in two parts")
            lines[test] = line
    missing = sorted(set(range(1, n + 1)) - {r["part"] for r in records})
    if missing:
        problems.append(f"missing parts of {n}: {_ranges(missing)}")
    outcomes = {}
    for test, line in lines.items():
        outcome = line.get("rtagent")
        if outcome == verdict.LISTED and test not in listed:
            outcome = verdict.UNLISTED
            problems.append(f"{verdict.UNLISTED} {test}: recorded as listed, no longer listed")
        elif outcome is not None and outcome not in verdict.GOOD:
            problems.append(f"{outcome} {test}: {line.get('why', '')}")
        if outcome is not None:
            outcomes[test] = outcome
    values = list(outcomes.values())
    stock = [line["stock"] for line in lines.values()]
    figures = {
        "full_tests": tree_count,
        "full_recorded": len(lines),
        "full_stock_passed": sum(s in STOCK_PASSES for s in stock),
        "full_stock_failed": sum(s not in STOCK_PASSES and s != "skip" for s in stock),
        "full_stock_skipped": stock.count("skip"),
        "full_rtagent_passed": sum(v in (verdict.PASSED, verdict.FLAKY_ON_STOCK) for v in values),
        "full_tracker_unused": values.count(verdict.TRACKER_UNUSED),
        "full_listed": values.count(verdict.LISTED),
        "full_unlisted": sum(v in (verdict.UNLISTED, verdict.OTHER_FAILURE) for v in values),
        "full_listed_but_passes": values.count(verdict.LISTED_PASSES),
        "full_fails_on_stock": values.count(verdict.FAILS_ON_STOCK),
        "full_flaky": values.count(verdict.FLAKY),
        "full_flaky_on_stock": values.count(verdict.FLAKY_ON_STOCK),
        "full_not_injected": values.count(verdict.NOT_INJECTED),
        "full_parts": n,
        "full_parts_stale": stale,
        "full_parts_missing": len(missing),
        "full_parts_partial": partial,
    }
    return figures, problems


def _ranges(numbers):
    """'1, 3-5' of sorted [1, 3, 4, 5]."""
    runs = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
