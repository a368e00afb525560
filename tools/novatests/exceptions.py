# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""docs/nova.md's exceptions: nova's tests that pass on stock nova and fail
with rtagent, each with the signature of its failure and the reason.

A row of the table under "## Exceptions" is

    | `nova.tests.functional.<id>` | `<signature>` | <reason> |

The signature is a regular expression searched in the failure's text (the
traceback, with the exception's type and message, or an assertion's
message); a ``|`` in it is written ``\\|`` so the table stays a table.
"""

import re

_ROW = re.compile(
    r"^\|\s*`(?P<test>nova\.tests\.functional\.[\w.()\[\],-]+)`\s*\|"
    r"\s*`(?P<signature>(?:[^`\\]|\\.)*)`\s*\|(?P<reason>.*)\|\s*$"
)
_TEST_CELL = re.compile(r"^\|\s*`(nova\.tests\.functional\.[^`]+)`")


class ExceptionsError(Exception):
    """docs/nova.md's exceptions table cannot be read."""


def read(path):
    """{test id: (signature source, reason)} of the table in ``path``.

    :raises ExceptionsError: a row that names a test without a signature,
        a signature that does not compile, or a test listed twice.
    """
    found = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not _TEST_CELL.match(line):
                continue
            row = _ROW.match(line)
            if row is None:
                raise ExceptionsError(
                    f"{path}:{number}: an exception needs | `test` | `signature` | reason |"
                )
            test = row.group("test")
            signature = row.group("signature").replace("\\|", "|")
            try:
                re.compile(signature)
            except re.error as e:
                raise ExceptionsError(f"{path}:{number}: signature of {test}: {e}") from None
            if test in found:
                raise ExceptionsError(f"{path}:{number}: {test} is listed twice")
            found[test] = (signature, row.group("reason").strip())
    return found
