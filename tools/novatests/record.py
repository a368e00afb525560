# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The recorded baseline: stock nova's result for each selected test, kept
in the repository (tools/nova-baseline.json) so CI need not run stock nova
again, and keyed by what decides those results: nova's version, Python's,
the constraints file .venv-nova is built from (every package pinned) and the
selected test ids. ``make nova-baseline`` writes it; ``make test-nova``
refuses to compare against a record whose key is not this environment's.
"""

import hashlib
import importlib.metadata
import json
import os
import re
import sys

# A test status in the record; "flaky" failed once and passed when run again.
EXPECTED = ("success", "flaky")


class RecordError(Exception):
    """The record is missing, unreadable or not this environment's."""


def environment_key(constraints_path, ids):
    """The key of this environment and selection.

    :raises RecordError: a package the constraints pin is installed at
        another version (the virtualenv was not built from them).
    """
    with open(constraints_path, "rb") as f:
        constraints = f.read()
    drift = []
    for line in constraints.decode().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line.strip())
        if not pin:
            continue
        try:
            installed = importlib.metadata.version(pin.group(1))
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != pin.group(2):
            drift.append(f"{pin.group(1)} {installed or 'missing'} (pinned {pin.group(2)})")
    if drift:
        raise RecordError(
            f"the nova virtualenv is not what {constraints_path} pins: {', '.join(drift[:5])}"
            + (f" and {len(drift) - 5} more" if len(drift) > 5 else "")
        )
    return {
        "nova": importlib.metadata.version("nova"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "constraints_sha256": hashlib.sha256(constraints).hexdigest(),
        "selection_sha256": selection_digest(ids),
    }


def selection_digest(ids):
    return hashlib.sha256("".join(f"{t}\n" for t in sorted(ids)).encode()).hexdigest()


def load(path):
    """The record at ``path``: {"key": {...}, "tests": {id: {"status", "seconds"}}}.

    :raises RecordError: missing or not a record.
    """
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise RecordError(f"no recorded baseline at {path}") from None
    except (OSError, ValueError) as e:
        raise RecordError(f"{path}: {e}") from None
    if not isinstance(record, dict) or not {"key", "tests"} <= set(record):
        raise RecordError(f"{path}: not a baseline record (needs key and tests)")
    return record


def mismatch(record, key, ids):
    """Why ``record`` does not hold for this ``key`` and selection, or ''."""
    recorded = record["key"]
    why = [
        f"{name} {recorded.get(name)} recorded, {key[name]} here"
        for name in ("nova", "python", "constraints_sha256")
        if recorded.get(name) != key[name]
    ]
    if recorded.get("selection_sha256") != key["selection_sha256"]:
        old = set(record["tests"])
        added, removed = sorted(set(ids) - old), sorted(old - set(ids))
        part = f"selected tests differ: {len(added)} added, {len(removed)} removed"
        sample = (added or removed)[:1]
        why.append(part + (f" (e.g. {sample[0]})" if sample else ""))
    return "; ".join(why)


def expected(record, ids=None):
    """{test id: recorded entry} of the tests stock nova passed (of ``ids``)."""
    return {
        test: entry
        for test, entry in record["tests"].items()
        if entry["status"] in EXPECTED and (ids is None or test in ids)
    }


def flaky_on_stock(record):
    return {test for test, entry in record["tests"].items() if entry["status"] == "flaky"}


def write(path, key, suites, tests, previous=None):
    """Write a record; a test recorded flaky on stock nova before (same nova)
    stays flaky: one clean run does not prove a race gone."""
    if previous and previous["key"].get("nova") == key["nova"]:
        for test in flaky_on_stock(previous):
            if tests.get(test, {}).get("status") == "success":
                tests[test] = dict(tests[test], status="flaky")
    record = {"key": key, "suites": suites, "tests": dict(sorted(tests.items()))}
    with open(f"{path}.tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(f"{path}.tmp", path)
