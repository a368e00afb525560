"""Reading YAML from hostile files at a bounded cost.

Provider config files are input an operator (or whoever can write that
directory) controls, and the agent reads them as root at start-up and on
every SIGHUP. Everything here bounds what one reading may cost before any
Python object is built: the file (a regular file, at most
:data:`MAX_FILE_BYTES`, UTF-8), the YAML's nesting and aliases (a "billion
laughs" is refused from the parser's events in a millisecond), and every
message (one line, clipped, never the document itself).

Failures are reported through a ``fail(reason)`` callable that raises, so
the caller's own error class names its file.
"""

import os
import stat

import yaml

from rtagent.excerpt import MAX_REASON, clip, excerpt  # noqa: F401 - re-exported

# What one reading of the directory may cost. A real file is a few KiB;
# loading 1 MiB of YAML takes about 3 s.
MAX_FILES = 100
MAX_FILE_BYTES = 1 << 20
MAX_TOTAL_BYTES = 4 << 20
# Nova's schema nests 8 deep; anchors/aliases are allowed (nova's
# yaml.safe_load takes them) but the nodes they add are bounded.
MAX_DEPTH = 32
MAX_ALIASES = 1000
MAX_ALIAS_NODES = 100_000
# PyYAML builds a base-60 number ("1:59:59:...", YAML 1.1) in quadratic time
# (510 KB took 8 s), so an unquoted value that could be one is refused past
# this length; no number in the schema comes near it.
MAX_PLAIN_SCALAR = 256

# libyaml when present: the same safe loader, parsing in C.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text, fail):
    """The document in ``text``; YAML errors become one bounded line."""
    try:
        check_shape(text, fail)
        return yaml.load(text, Loader=LOADER)  # noqa: S506 (LOADER is a safe loader)
    except yaml.MarkedYAMLError as exc:
        # Not str(exc): it quotes the input around the error.
        mark = exc.problem_mark or exc.context_mark
        what = clip("; ".join(p for p in (exc.context, exc.problem) if p), 200)
        problem = f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark else what
    except yaml.YAMLError as exc:
        problem = clip(str(exc), 200)
    except ValueError as exc:  # an int of > 4,300 digits, a date like 2024-13-45
        problem = f"a value cannot be read ({clip(str(exc), 120)})"
    fail(f"not valid YAML: {problem}")


def check_shape(text, fail):
    """Refuse, from the parser's events and before any object is built,
    nesting deeper than MAX_DEPTH, more than MAX_ALIASES aliases, aliases
    that expand to more than MAX_ALIAS_NODES nodes in all, and an alias to
    a node that contains it (a cycle)."""
    sizes, open_, aliases, added, count = {}, [], 0, 0, 0
    for event in yaml.parse(text, Loader=LOADER):
        where = f"line {event.start_mark.line + 1}"
        if isinstance(event, yaml.DocumentStartEvent):
            sizes.clear()
        elif isinstance(event, yaml.AliasEvent):
            aliases, size = aliases + 1, sizes.get(event.anchor)
            if size is None:
                fail(f"{where}: alias *{clip(event.anchor, 60)} is undefined or recursive")
            added, count = added + size, count + size
            if aliases > MAX_ALIASES or added > MAX_ALIAS_NODES:
                fail(
                    f"{where}: aliases expand too far (at most {MAX_ALIASES} aliases "
                    f"adding {MAX_ALIAS_NODES} nodes in all)"
                )
        elif isinstance(event, yaml.CollectionStartEvent):
            open_.append((event.anchor, count))
            count += 1
            if len(open_) > MAX_DEPTH:
                fail(f"{where}: nested deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, start = open_.pop()
            if anchor is not None:
                sizes[anchor] = count - start
        elif isinstance(event, yaml.ScalarEvent):
            if not event.style and _maybe_base60(event.value):
                fail(
                    f"{where}: an unquoted number of {len(event.value)} characters "
                    f"(at most {MAX_PLAIN_SCALAR})"
                )
            count += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1


def read(path, fail):
    """(text, length in bytes) of the file at ``path``, at most MAX_FILE_BYTES.

    Opened non-blocking and refused unless a regular file, so that a FIFO
    cannot hang the reload nor a device feed it; read no further than the
    limit."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                fail("not a regular file")
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        fail(f"cannot read: {exc.strerror}")
    if len(data) > MAX_FILE_BYTES:
        fail(f"bigger than {MAX_FILE_BYTES} bytes (the limit)")
    try:
        return data.decode("utf-8"), len(data)
    except UnicodeDecodeError as exc:
        fail(f"not UTF-8 text (byte {exc.start})")


def _maybe_base60(value):
    """A long plain scalar that YAML 1.1 could read as a base-60 number."""
    return len(value) > MAX_PLAIN_SCALAR and ":" in value and value[:1] in "+-0123456789"
