"""nova's CPU list syntax (``0-3,^2,8``: single ids, ranges, ``^``
exclusions), used by ``[compute] cpu_*_set`` and by flavor extra specs
such as ``hw:numa_cpus.N`` and ``hw:cpu_dedicated_mask``."""


def parse(spec):
    """The set of CPU ids ``spec`` selects.

    :returns: a frozenset (empty when the exclusions remove everything).
    :raises ValueError: a bad item or a reversed range (the message says
        which).
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
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ValueError(f"bad item {raw.strip()!r}") from None
        if first < 0 or first > last:
            raise ValueError(f"bad range {raw.strip()!r}")
        target.update(range(first, last + 1))
    return frozenset(include - exclude)
