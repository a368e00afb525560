# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The whole-tree run's parts, pure: nova's functional test ids split into
``n`` parts that are the same for the same tree and about equal in time.

The split depends on the ids alone (and the estimates below, which are
code): no timing record that a run rewrites, so a part run today and a
part run next week of the same tree never share or miss a test.
"""

import hashlib
import re


class PartError(ValueError):
    """A part is not named as ``k/n`` with 1 <= k <= n."""


# Estimated stock seconds of one test, by where it lives in the tree (the
# first pattern that matches): the means stock nova measured here for the
# suites tools/nova-baseline.json records (libvirt's 3.2-9.7 s, test_servers'
# 5.1 s, functional/compute's 0.3-5 s), regressions' 616 s for 179 tests
# (issue 46), and a sample of api_sample_tests run on stock for the rest.
# They only balance the parts: a wrong estimate costs wall-clock time, never
# a test.
ESTIMATES = (
    (r"\.libvirt\.", 5.0),
    (r"\.test_servers\.", 5.0),
    (r"\.regressions\.", 3.4),
    (r"\.api_sample_tests\.", 1.5),
    (r"\.notification_sample_tests\.", 2.0),
    (r"\.compute\.", 1.5),
    (r"", 3.0),
)


def parse(text):
    """(k, n) of a part named ``k/n``.

    :raises PartError: anything else, with what was given.
    """
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match:
        raise PartError(f"a part is k/n, e.g. PART=1/8 (given {text!r})")
    k, n = int(match.group(1)), int(match.group(2))
    if not 1 <= k <= n:
        raise PartError(f"a part k/n needs 1 <= k <= n (given {text!r})")
    return k, n


def estimate(test):
    """The estimated stock seconds of ``test``."""
    return next(seconds for pattern, seconds in ESTIMATES if re.search(pattern, test))


def split(ids, n):
    """``ids`` in ``n`` lists (part 1 first), each in id order.

    Heaviest estimate first, ties in id order, each test goes to the part
    with the least estimated time so far (the lowest-numbered on a tie):
    deterministic, and within one test's estimate of balanced.
    """
    if n < 1:
        raise PartError(f"at least one part (given {n})")
    loads = [0.0] * n
    parts = [[] for _ in range(n)]
    for test in sorted(set(ids), key=lambda t: (-estimate(t), t)):
        least = min(range(n), key=lambda i: (loads[i], i))
        loads[least] += estimate(test)
        parts[least].append(test)
    return [sorted(part) for part in parts]


def digest(ids):
    """The sha256 of a set of test ids (sorted, one a line)."""
    return hashlib.sha256("".join(f"{t}\n" for t in sorted(ids)).encode()).hexdigest()
