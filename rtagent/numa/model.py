"""The values the fitter reads and returns. Immutable; CPU ids are host
CPU numbers, vCPU ids the guest's."""

import dataclasses

# Page size requests, as nova's hw:mem_page_size names them; an int is a
# size in KiB.
PAGES_SMALL = "small"
PAGES_LARGE = "large"
PAGES_ANY = "any"

# hw:cpu_thread_policy.
PREFER = "prefer"
ISOLATE = "isolate"
REQUIRE = "require"
THREAD_POLICIES = (PREFER, ISOLATE, REQUIRE)


@dataclasses.dataclass(frozen=True)
class Pages:
    """One page size of a host cell: ``total`` pages of ``size_kb``, of which
    ``used`` are taken by guests and ``reserved`` kept for the host by the
    operator (``[DEFAULT] reserved_huge_pages``)."""

    size_kb: int
    total: int
    used: int = 0
    reserved: int = 0

    @property
    def free(self):
        return self.total - self.used - self.reserved


@dataclasses.dataclass(frozen=True)
class HostCell:
    """A host NUMA cell as the fitter sees it.

    :param cpuset: CPUs for shared (floating) vCPUs (``cpu_shared_set``).
    :param pcpuset: CPUs for pinned vCPUs (``cpu_dedicated_set``).
    :param siblings: the cell's cores, each a frozenset of thread ids.
    :param pinned: pCPUs already pinned (or reserved) by guests.
    :param cpu_usage: shared vCPUs already placed here.
    :param memory_usage: MiB already used by guests on small pages.
    :param pages: :class:`Pages`, smallest first; the smallest is the
        base page. Empty: page sizes unknown, only ``memory_mb`` counts.
    :param socket: the cell's socket id, or None when unknown (for nova's
        view; the fitter does not read it).
    """

    id: int
    cpuset: frozenset
    pcpuset: frozenset
    memory_mb: int
    siblings: tuple = ()
    pinned: frozenset = frozenset()
    cpu_usage: int = 0
    memory_usage: int = 0
    pages: tuple = ()
    socket: int | None = None

    @property
    def free_pcpus(self):
        return self.pcpuset - self.pinned

    def cores(self):
        """The cell's cores (frozensets of thread ids within ``pcpuset``);
        a CPU listed in no sibling set is a core of its own."""
        seen, cores = set(), []
        for core in self.siblings:
            threads = frozenset(core) & self.pcpuset
            if threads and not threads & seen:
                cores.append(threads)
                seen |= threads
        cores.extend(frozenset({cpu}) for cpu in sorted(self.pcpuset - seen))
        return tuple(cores)


@dataclasses.dataclass(frozen=True)
class GuestCell:
    """A guest NUMA cell.

    :param cpuset: vCPUs that float over the host cell's shared CPUs.
    :param pcpuset: vCPUs pinned to dedicated host CPUs.
    :param pagesize: None (no page request: memory counted against the
        cell's memory, overcommitted by the RAM ratio), ``PAGES_SMALL``,
        ``PAGES_LARGE``, ``PAGES_ANY`` or a size in KiB.
    :param thread_policy: for ``pcpuset``: ``PREFER`` (default),
        ``ISOLATE`` or ``REQUIRE``.
    """

    id: int
    memory_mb: int
    cpuset: frozenset = frozenset()
    pcpuset: frozenset = frozenset()
    pagesize: object = None
    thread_policy: str = PREFER


@dataclasses.dataclass(frozen=True)
class Limits:
    """Overcommit of shared CPUs and of memory not on explicit pages
    (the node's allocation ratios). Pinned CPUs and pages never overcommit."""

    cpu_allocation_ratio: float = 1.0
    ram_allocation_ratio: float = 1.0


@dataclasses.dataclass(frozen=True)
class CellFit:
    """Where one guest cell goes.

    :param pinning: ``((vcpu, pcpu), ...)`` sorted by vCPU.
    :param taken: pCPUs no other guest may use after this fit: the pinned
        ones, the whole cores of an ``ISOLATE`` cell, and ``reserved``.
    :param reserved: pCPUs reserved for the emulator threads.
    :param pagesize_kb: the page size backing the cell's memory, or None.
    """

    guest_cell: int
    host_cell: int
    pinning: tuple = ()
    taken: frozenset = frozenset()
    reserved: frozenset = frozenset()
    pagesize_kb: int | None = None
