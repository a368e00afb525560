"""docs/nova.md's exceptions table as make test-nova reads it
(tools/novatests/exceptions.py), and the document itself."""

import os
import re

import pytest

from tools.novatests import exceptions

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
T = "nova.tests.functional.test_x.C.test_y"


def write(tmp_path, *rows):
    path = tmp_path / "nova.md"
    path.write_text(
        "## Exceptions\n\n| test | signature | reason |\n| --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n"
    )
    return str(path)


def test_a_row_gives_its_signature_and_reason(tmp_path):
    path = write(tmp_path, f"| `{T}` | `NoValidHost: No valid host` | the reason, with `code`. |")
    assert exceptions.read(path) == {T: ("NoValidHost: No valid host", "the reason, with `code`.")}


def test_an_escaped_bar_is_an_alternative(tmp_path):
    path = write(tmp_path, f"| `{T}` | `A\\|B` | why |")
    signature, _ = exceptions.read(path)[T]
    assert signature == "A|B" and re.search(signature, "xxBxx")


@pytest.mark.parametrize(
    "row, message",
    [
        (f"| `{T}` | the reason only |", "needs | `test` | `signature` | reason |"),
        (f"| `{T}` | `(unclosed` | why |", "signature of"),
    ],
)
def test_a_bad_row_is_named_with_its_line(tmp_path, row, message):
    path = write(tmp_path, row)
    with pytest.raises(exceptions.ExceptionsError, match=re.escape(message)) as e:
        exceptions.read(path)
    assert ":5:" in str(e.value)


def test_a_test_listed_twice_is_refused(tmp_path):
    path = write(tmp_path, f"| `{T}` | `A` | why |", f"| `{T}` | `B` | why |")
    with pytest.raises(exceptions.ExceptionsError, match="listed twice"):
        exceptions.read(path)


def test_docs_nova_md_reads_and_every_entry_has_a_reason():
    listed = exceptions.read(os.path.join(ROOT, "docs", "nova.md"))
    assert listed
    for test, (signature, reason) in listed.items():
        assert signature.strip() and len(reason) > 20, test
