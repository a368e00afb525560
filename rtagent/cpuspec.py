"""nova's CPU list syntax (``0-3,^2,8``: single ids, ranges, ``^``
exclusions), used by ``[compute] cpu_*_set`` and by flavor extra specs
such as ``hw:numa_cpus.N`` and ``hw:cpu_dedicated_mask``."""

import re

from rtagent.excerpt import clip, excerpt

# No host or guest has more CPUs (Linux's own build limit is 8192); a bound
# also keeps a short spec (``0-9999999999``) from expanding into a set of
# billions of ids.
MAX_CPU_ID = 16383

_ID = re.compile(r"\A[0-9]+\Z")  # ASCII digits only: int() also takes 1_000


def parse(spec):
    """The set of CPU ids ``spec`` selects.

    Bounded whatever its length: ranges are merged before they are expanded
    (a megabyte of ``0-16383,`` is one range), and an id is compared by its
    digits before it is converted.

    :returns: a frozenset (empty when the exclusions remove everything).
    :raises ValueError: a bad item, a reversed range, or an id above
        :data:`MAX_CPU_ID` (the message says which, clipped).
    """
    include, exclude = [], []
    for raw in spec.split(","):
        part = raw.strip()
        if not part:
            continue
        target = include
        if part.startswith("^"):
            target, part = exclude, part[1:].strip()
        lo, dash, hi = part.partition("-")
        lo, hi = lo.strip(), (hi.strip() if dash else lo.strip())
        if not (_ID.match(lo) and _ID.match(hi)):
            raise ValueError(f"bad item {excerpt(raw.strip())}")
        first, last = _cpu_id(lo, raw), _cpu_id(hi, raw)
        if first > last:
            raise ValueError(f"bad range {excerpt(raw.strip())}")
        target.append((first, last))
    return frozenset(_expand(include) - _expand(exclude))


def _cpu_id(digits, raw):
    if len(digits) > 5 and len(digits.lstrip("0")) > len(str(MAX_CPU_ID)):
        value = None  # not converted: int() of 5,000 digits raises
    else:
        value = int(digits.lstrip("0") or "0")
    if value is None or value > MAX_CPU_ID:
        item = excerpt(raw.strip())
        raise ValueError(f"CPU id {clip(digits, 20)} in {item} is above {MAX_CPU_ID}")
    return value


def _expand(ranges):
    """The ids of ``ranges`` ((first, last) pairs), each id added once."""
    ids = set()
    end = -1  # the last id added
    for first, last in sorted(ranges):
        if last > end:
            ids.update(range(max(first, end + 1), last + 1))
            end = last
    return ids
