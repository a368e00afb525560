# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Bounded quotes of hostile input in messages: one line, control
characters escaped, never longer than asked, whatever the value (a 1 MB
option value, a million-digit integer, JSON nested 100,000 deep)."""

import reprlib

MAX_REASON = 1000


def clip(text, limit=MAX_REASON):
    """``text`` on one line, control characters escaped, at most ``limit``
    characters (plus "...")."""
    head = text[:limit]
    if not head.isprintable():
        head = "".join(c if c.isprintable() else repr(c)[1:-1] for c in head)
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
