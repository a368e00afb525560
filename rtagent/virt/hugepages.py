"""Reserved huge pages: ``[DEFAULT] reserved_huge_pages``, nova's option.

Each value reserves ``count`` pages of one size on one NUMA cell for the
host, in nova's syntax::

    reserved_huge_pages = node:0,size:2048,count:64
    reserved_huge_pages = node:1,size:1GB,count:1

The size is in KiB, or carries a unit: ``K``/``KB``/``KiB``, ``M``/``MB``/
``MiB``, ``G``/``GB``/``GiB``, any case, all binary (``2MB`` = 2048 KiB, as
nova reads it). :func:`parse` checks the syntax alone (start-up,
``check-config``, reload); :func:`check` holds the result against the cells
of the host, where the host is read.
"""

import re

from rtagent.excerpt import excerpt
from rtagent.virt.errors import InvalidReservedHugePages

FIELDS = ("node", "size", "count")
_KIB_PER_UNIT = {"": 1, "K": 1, "M": 1024, "G": 1024**2}
# No count, cell or page size comes near this many digits.
_MAX_DIGITS = 18
_SIZE = re.compile(r"^([0-9]+)\s*(?:([KMG])(?:I?B)?)?$", re.IGNORECASE)


def parse(entries):
    """The reservations ``entries`` (the option's values) ask for.

    Blank values are ignored. Unlike nova, which keeps the last of two
    entries for one page size of one cell, a repeated one is refused.

    :param entries: iterable of strings, or None.
    :returns: tuple of ``(NUMA cell id, page size KiB, count)``, sorted.
    :raises InvalidReservedHugePages: an entry is not ``node:N,size:S,count:C``
        (a field missing, repeated, unknown or not ``field:value``), a
        value is not a non-negative integer (size: positive, with an
        optional unit), or a cell's page size is reserved twice.
    """
    found = {}
    for entry in entries or ():
        if not entry.strip():
            continue
        node, size_kb, count = _parse_entry(entry)
        if (node, size_kb) in found:
            raise InvalidReservedHugePages(
                entry=entry,
                field="size",
                reason=f"cell {node}'s {size_kb} KiB pages are already reserved "
                f"by {excerpt(found[node, size_kb][1])}",
            )
        found[node, size_kb] = (count, entry)
    return tuple(sorted((node, size, count) for (node, size), (count, _) in found.items()))


def check(reserved, cells):
    """Check parsed reservations against the host's NUMA cells.

    :param reserved: the result of :func:`parse`.
    :param cells: the host's :class:`~rtagent.virt.host.NumaCell` values.
    :returns: ``reserved`` unchanged.
    :raises InvalidReservedHugePages: a node is not a cell of the host, a
        size is not one of that cell's page sizes, or a count exceeds the
        cell's pages of that size.
    """
    by_id = {cell.id: cell for cell in cells}
    for node, size_kb, count in reserved:
        entry = format_entry(node, size_kb, count)
        cell = by_id.get(node)
        if cell is None:
            known = ", ".join(str(i) for i in sorted(by_id)) or "none"
            raise InvalidReservedHugePages(
                entry=entry,
                field="node",
                reason=f"{node} is not a NUMA cell of this host (cells: {known})",
            )
        pages = dict(cell.pages)
        if size_kb not in pages:
            sizes = ", ".join(str(s) for s in sorted(pages)) or "none"
            raise InvalidReservedHugePages(
                entry=entry,
                field="size",
                reason=f"{size_kb} KiB is not a page size of cell {node} (KiB: {sizes})",
            )
        if count > pages[size_kb]:
            raise InvalidReservedHugePages(
                entry=entry,
                field="count",
                reason=f"{count} is more than cell {node}'s {pages[size_kb]} pages "
                f"of {size_kb} KiB",
            )
    return reserved


def format_entry(node, size_kb, count):
    """``(0, 2048, 64)`` -> ``'node:0,size:2048,count:64'``."""
    return f"node:{node},size:{size_kb},count:{count}"


def _parse_entry(entry):
    values = {}
    for raw in entry.split(","):
        item = raw.strip()
        name, colon, value = item.partition(":")
        name, value = name.strip(), value.strip()
        if not colon or not name or not value:
            raise InvalidReservedHugePages(
                entry=entry, field=item or "entry", reason="not field:value"
            )
        if name not in FIELDS:
            raise InvalidReservedHugePages(
                entry=entry, field=name, reason=f"unknown field (expected {', '.join(FIELDS)})"
            )
        if name in values:
            raise InvalidReservedHugePages(entry=entry, field=name, reason="given twice")
        values[name] = value
    for name in FIELDS:
        if name not in values:
            raise InvalidReservedHugePages(entry=entry, field=name, reason="missing")
    return (
        _count(entry, "node", values["node"]),
        _size_kb(entry, values["size"]),
        _count(entry, "count", values["count"]),
    )


def _count(entry, field, value):
    # Digits counted before int(): past 4,300 of them it raises ValueError.
    if not value.isdigit() or not value.isascii() or len(value) > _MAX_DIGITS:
        raise InvalidReservedHugePages(
            entry=entry,
            field=field,
            reason=f"{excerpt(value)} is not an integer from 0 to {10**_MAX_DIGITS - 1}",
        )
    return int(value)


def _size_kb(entry, value):
    found = _SIZE.match(value) if len(value) <= _MAX_DIGITS + 3 else None
    size = int(found.group(1)) * _KIB_PER_UNIT[(found.group(2) or "").upper()] if found else 0
    if size < 1:
        raise InvalidReservedHugePages(
            entry=entry,
            field="size",
            reason=f"{excerpt(value)} is not a page size (KiB, or a number with "
            "K/KB/KiB, M/MB/MiB or G/GB/GiB)",
        )
    return size
