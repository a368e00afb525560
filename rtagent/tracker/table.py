"""An immutable mapping that knows which keys changed since a recent version.

The tracker writes, for each operation, only the rows that changed between
the adopted state and the next one. Comparing every row of two maps costs
O(N) per claim (a thousand instances: several milliseconds, most of a
claim). A :class:`Table` made from another by :meth:`Table.set` or
:meth:`Table.without` remembers that version and the keys it touched, so
the keys that may differ between two close versions come from a short
walk instead of a scan of every entry.

Making a new version still copies the underlying dict (C code: about 5 us
for a thousand entries); what it avoids is Python work per entry.
"""

import collections.abc

# How many versions back a table remembers. The tracker compares a state
# with one derived from it by a few steps; further apart (or unrelated)
# tables are compared entry by entry, which is only slower.
MAX_HISTORY = 8


class Table(collections.abc.Mapping):
    """A read-only mapping; :meth:`set` and :meth:`without` return new ones.

    :param data: a mapping or iterable of pairs to copy.
    """

    __slots__ = ("_data", "_parent", "_touched")

    def __init__(self, data=()):
        self._data = dict(data)
        # The version this one was made from, and the keys it touched.
        self._parent = None
        self._touched = frozenset()

    def _derive(self, data, touched):
        table = Table.__new__(Table)
        table._data = data
        table._parent = self
        table._touched = frozenset(touched)
        # Keep MAX_HISTORY versions behind the new one and let older ones
        # go: cut the chain there. History is only a shortcut, so cutting a
        # link another version shares costs that one a slower comparison,
        # never a wrong one.
        link = table
        for _ in range(MAX_HISTORY):
            if link._parent is None:
                break
            link = link._parent
        else:
            link._parent = None
        return table

    def set(self, key, value):
        """A new table with ``key`` mapped to ``value``."""
        data = dict(self._data)
        data[key] = value
        return self._derive(data, (key,))

    def without(self, keys):
        """A new table without ``keys`` (missing ones ignored); ``self``
        when none is present."""
        gone = [k for k in keys if k in self._data]
        if not gone:
            return self
        data = dict(self._data)
        for key in gone:
            del data[key]
        return self._derive(data, gone)

    def touched_since(self, older):
        """Keys whose entries may differ between ``older`` and ``self``, or
        None when ``older`` is not one of this table's recent versions (then
        compare every entry)."""
        keys = set()
        table = self
        while table is not None:
            if table is older:
                return keys
            keys |= table._touched
            table = table._parent
        return None

    # -- the read-only mapping, at dict speed ---------------------------

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data

    def get(self, key, default=None):
        return self._data.get(key, default)

    def keys(self):
        return self._data.keys()

    def items(self):
        return self._data.items()

    def values(self):
        return self._data.values()

    def __eq__(self, other):
        if isinstance(other, Table):
            return self._data == other._data
        if isinstance(other, collections.abc.Mapping):
            return self._data == dict(other)
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"Table({self._data!r})"
