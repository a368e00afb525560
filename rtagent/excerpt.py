# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Hostile text made safe to show: one line, control characters escaped
(:func:`escaped`, :func:`printable`), and bounded quotes (:func:`clip`,
:func:`excerpt`), never longer than asked whatever the value (a 1 MB option
value, a million-digit integer, JSON nested 100,000 deep)."""

import reprlib

MAX_REASON = 1000


def escaped(text):
    """``str(text)`` on one line and safe for a terminal: every character
    that is not printable (C0 and C1 controls, DEL, bidirectional controls
    such as U+202E, line and paragraph separators, lone surrogates,
    unassigned code points) written as its Python escape (``\\x1b``,
    ``\\u202e``, ``\\n``); the rest, backslashes included, kept.

    Escaping escaped text changes nothing, so a message may be escaped where
    it is sent or written although parts of it were escaped (or quoted with
    ``repr``) where it was built. What logs and RPC error replies use.
    """
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable(text):
    """:func:`escaped`, with the backslash itself doubled (``\\\\``): the
    result reads back unambiguously (``\\u202e`` is an escape, ``\\\\u202e``
    the six characters), but escaping it again doubles them again. For
    values shown once, as they are (status); not for messages that quote
    values already escaped."""
    text = str(text)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join("\\\\" if c == "\\" else c if c.isprintable() else repr(c)[1:-1] for c in text)


def escaped_tree(value, escape=escaped):
    """A copy of a JSON-able ``value`` whose strings (values and keys) are
    passed through ``escape``."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, dict):
        return {escaped_tree(k, escape): escaped_tree(v, escape) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [escaped_tree(v, escape) for v in value]
    return value


def clip(text, limit=MAX_REASON):
    """``text`` :func:`escaped`, at most ``limit`` characters (plus "...")."""
    head = escaped(text[:limit])
    return head[:limit] + "..." if len(head) > limit or len(text) > limit else head


class _Excerpt(reprlib.Repr):
    """repr() that stays short for any value: long strings, big
    collections, deep nesting, integers of a million digits."""

    def __init__(self):
        super().__init__()
        self.maxlevel = 2
        self.maxstring = self.maxother = 60
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 4

    def repr_int(self, x, level):
        # repr() of a huge int is slow and, past 4,300 digits, raises.
        return repr(x) if x.bit_length() <= 64 else f"<a {x.bit_length()}-bit integer>"


excerpt = _Excerpt().repr
