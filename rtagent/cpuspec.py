"""nova's CPU list syntax (``0-3,^2,8``: single ids, ranges, ``^``
exclusions), used by ``[compute] cpu_*_set`` and by flavor extra specs
such as ``hw:numa_cpus.N`` and ``hw:cpu_dedicated_mask``."""

import re

# No host or guest has more CPUs (Linux's own build limit is 8192); a bound
# also keeps a short spec (``0-9999999999``) from expanding into a set of
# billions of ids.
MAX_CPU_ID = 16383

_ID = re.compile(r"\A[0-9]+\Z")  # ASCII digits only: int() also takes 1_000


def parse(spec):
    """The set of CPU ids ``spec`` selects.

    :returns: a frozenset (empty when the exclusions remove everything).
    :raises ValueError: a bad item, a reversed range, or an id above
        :data:`MAX_CPU_ID` (the message says which).
    """
    include, exclude = set(), set()
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
            raise ValueError(f"bad item {raw.strip()!r}")
        first, last = int(lo), int(hi)
        if first > last:
            raise ValueError(f"bad range {raw.strip()!r}")
        if last > MAX_CPU_ID:
            raise ValueError(f"CPU id {last} in {raw.strip()!r} is above {MAX_CPU_ID}")
        target.update(range(first, last + 1))
    return frozenset(include - exclude)
