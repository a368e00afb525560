"""Fit a guest's NUMA cells onto a host's: exact, deterministic, pure.

nova 34's rules (``nova/virt/hardware.py``: ``numa_fit_instance_to_host``
and the cell fit it calls), with the search made exact: a fit is found
whenever one exists under the rules below, and the inputs are never
changed (nova's fitter caches by a cell id it overwrites while fitting, and
misses valid fits when guest cells differ in size).

A guest's CPU policy is read from all its cells, as nova's
``hw:cpu_policy``: ``shared`` (no pinned vCPU in any cell), ``dedicated``
(no shared vCPU in any cell) or ``mixed``. A cell of a dedicated or mixed
guest is a *pinned* cell, even one with no pinned vCPU of its own.

Rules for one guest cell on one host cell:

- **Memory**, without a page request: with page sizes known, the host's
  smallest page size must hold the cell's memory (free pages for a pinned
  cell, all pages otherwise: shared guests may overcommit each other, never
  themselves); without page sizes, the cell's memory must be free (pinned)
  or within the cell's memory (shared). With a page request (small, large,
  any or a size), the largest allowed page size whose free pages hold the
  memory exactly (a whole number of pages) is chosen; pages never
  overcommit.
- **Shared vCPUs** (``cpuset``, shared and mixed guests): no more than the
  host cell's shared CPUs; with limits, the cell's shared usage stays
  within ``cpu_allocation_ratio`` times its shared CPUs, and its memory
  within ``ram_allocation_ratio`` times its memory.
- **Pinned vCPUs** (``pcpuset``, pinned cells), each on a distinct free
  dedicated CPU. A core's *free threads* are its free dedicated CPUs; the
  cell's *threads per core* is the most CPUs of one core within its shared
  and dedicated sets (nova's sibling lists), and the cell has
  hyper-threads when that is more than one.

  - ``prefer`` takes any.
  - ``require`` places the vCPUs ``k`` to a core (``k`` >= 2, the same on
    every core, the largest that works; the last core used may hold
    fewer), on cores with at least ``k`` free threads. A cell with no
    pinned vCPU still needs one core with two free threads.
  - ``isolate`` is refused on a cell with hyper-threads (nova 34 keeps
    such guests off SMT hosts, bug 1889633), except when its shared and
    dedicated sets are the same (nova's pre-``cpu_dedicated_set`` layout,
    where it pins one thread of each wholly free core). Each vCPU goes
    alone on a core whose threads (as many as the cell's threads per core)
    are all free, and takes the whole core. A cell with no pinned vCPU is
    refused (nova finds "no pinning" for it).
- **Emulator threads** (``emulator_isolate``, pinned guests only): one
  more free dedicated CPU on the host cell of the guest's first cell,
  reserved; not on a core an ``isolate`` cell took (and under ``isolate``
  the reserved CPU's free siblings are taken too, as nova pins it "with
  siblings"). As nova, the first cell must have a pinned vCPU for it.

Guest cells go to distinct host cells. Host cells are tried least used
first (nova's default, spreading guests) or most used first (``pack``, nova's
``packing_host_numa_cells_allocation_strategy``); among equally used cells,
by id. The first complete fit in that order is returned.
"""

import itertools

from rtagent.numa import model

_NO_LIMITS = None

# nova's hw:cpu_policy, as read from a guest's cells (cpu_policy()).
SHARED, DEDICATED, MIXED = "shared", "dedicated", "mixed"


def cpu_policy(guest_cells):
    """nova's ``hw:cpu_policy`` of a guest, from its cells: SHARED when no
    cell has a pinned vCPU, DEDICATED when none has a shared one, else
    MIXED."""
    pinned = any(g.pcpuset for g in guest_cells)
    shared = any(g.cpuset for g in guest_cells)
    if not pinned:
        return SHARED
    return MIXED if shared else DEDICATED


def fit(
    host_cells,
    guest_cells,
    limits=_NO_LIMITS,
    emulator_isolate=False,
    pack=False,
    *,
    accept=None,
    cell_rank=None,
):
    """Place every guest cell on its own host cell.

    :param host_cells: :class:`~rtagent.numa.model.HostCell` values.
    :param guest_cells: :class:`~rtagent.numa.model.GuestCell` values, in
        the guest's order (the first takes the emulator threads' CPU); the
        guest's CPU policy is read from them all (:func:`cpu_policy`).
    :param limits: :class:`~rtagent.numa.model.Limits`, or None: shared
        CPUs and memory are then not checked against usage.
    :param accept: callable(fits) -> bool, asked of each layout that fits
        (a tuple of CellFit): False moves on to the next one, as nova's
        fitter does when the instance's PCI devices cannot be had on the
        cells chosen. None: the first layout that fits.
    :param cell_rank: callable(host cell id) -> a number; host cells are
        tried in its order first, then by usage (nova puts the cells with
        the most free PCI devices first for a guest that asks for devices,
        last for one that does not), when the guest leaves some cells
        unused. None: by usage only.
    :returns: a tuple of :class:`~rtagent.numa.model.CellFit`, one per
        guest cell in order, or None when nothing fits.
    """
    host_cells, guests = tuple(host_cells), tuple(guest_cells)
    # As nova: the PCI order only matters when there are cells to spare.
    rank = cell_rank if cell_rank and len(host_cells) > len(guests) else (lambda _cell: 0)
    hosts = sorted(host_cells, key=lambda h: (rank(h.id), _usage(h) * (-1 if pack else 1), h.id))
    if not guests or len(guests) > len(hosts):
        return None
    policy = cpu_policy(guests)
    found = {}

    def cell(host, index):
        reserve = 1 if emulator_isolate and index == 0 else 0
        key = (host.id, index)
        if key not in found:
            found[key] = fit_cell(host, guests[index], limits, reserve, policy=policy)
        return found[key]

    for chosen in itertools.permutations(hosts, len(guests)):
        fits = []
        for index, host in enumerate(chosen):
            placed = cell(host, index)
            if placed is None:
                break
            fits.append(placed)
        else:
            if accept is None or accept(tuple(fits)):
                return tuple(fits)
    return None


def _usage(host):
    return len(host.pinned) + host.cpu_usage


def fit_cell(host, guest, limits=_NO_LIMITS, reserve=0, policy=None):
    """One guest cell on one host cell, or None (see the module's rules).

    :param reserve: dedicated CPUs to reserve for the emulator threads
        (ignored for a shared guest, as nova does).
    :param policy: the guest's CPU policy (:func:`cpu_policy` of all its
        cells); None: read from this cell alone.
    """
    policy = policy or cpu_policy((guest,))
    pinned = policy != SHARED
    pagesize = _pages(host, guest, pinned)
    if pagesize is False:
        return None
    if policy != DEDICATED and not _shared_fits(host, guest, limits):
        return None
    pinning, taken, reserved = (), frozenset(), frozenset()
    if pinned:
        placed = _pin(host, guest, reserve)
        if placed is None:
            return None
        pinning, taken, reserved = placed
    return model.CellFit(
        guest_cell=guest.id,
        host_cell=host.id,
        pinning=pinning,
        taken=taken,
        reserved=reserved,
        pagesize_kb=pagesize,
    )


# -- memory ---------------------------------------------------------------


def _pages(host, guest, pinned):
    """The page size (KiB) chosen, None for no page request, False if the
    memory does not fit."""
    memory_kb = guest.memory_mb * 1024
    if guest.pagesize is not None:
        for size in _allowed_sizes(host, guest.pagesize):
            if _holds(host, size, memory_kb, use_free=True):
                return size
        return False
    if host.pages:
        if not _holds(host, host.pages[0].size_kb, memory_kb, use_free=pinned):
            return False
        return None
    free = host.memory_mb - host.memory_usage
    if guest.memory_mb > (free if pinned else host.memory_mb):
        return False
    return None


def _allowed_sizes(host, request):
    """Page sizes a request allows, in the order they are tried."""
    sizes = [p.size_kb for p in host.pages]
    if not sizes:
        return []
    if request == model.PAGES_SMALL:
        return sizes[:1]
    if request == model.PAGES_LARGE:
        return sorted(sizes[1:], reverse=True)
    if request == model.PAGES_ANY:
        return sorted(sizes, reverse=True)
    return [request] if request in sizes else []


def _holds(host, size_kb, memory_kb, use_free):
    pages = next(p for p in host.pages if p.size_kb == size_kb)
    available = (pages.free if use_free else pages.total) * size_kb
    return memory_kb % size_kb == 0 and memory_kb <= available


# -- shared CPUs ------------------------------------------------------------


def _shared_fits(host, guest, limits):
    # A mixed cell with no shared vCPU of its own is checked too, as nova.
    wanted = len(guest.cpuset)
    if wanted > len(host.cpuset):
        return False
    if limits is None:
        return True
    if host.cpu_usage + wanted > len(host.cpuset) * limits.cpu_allocation_ratio:
        return False
    return host.memory_usage + guest.memory_mb <= host.memory_mb * limits.ram_allocation_ratio


# -- pinned CPUs ------------------------------------------------------------


def _pin(host, guest, reserve):
    """``(pinning, taken, reserved)`` or None."""
    vcpus = sorted(guest.pcpuset)
    free = host.free_pcpus
    if len(vcpus) + reserve > len(host.pcpuset) or len(vcpus) + reserve > len(free):
        return None
    if reserve and not vcpus:
        # nova reserves the emulator threads' CPU only beside pinned vCPUs.
        return None
    if guest.thread_policy == model.ISOLATE:
        return _isolate(host, vcpus, free, reserve)
    cores = [core & free for core in host.cores() if core & free]
    if guest.thread_policy == model.REQUIRE:
        counts = _require_counts(cores, len(vcpus))
        if counts is None:
            return None
    else:
        counts = _prefer_counts(cores, len(vcpus))
    threads = []
    for core, count in zip(_fullest_first(cores), counts, strict=True):
        threads.extend(sorted(core)[:count])
    pinning = tuple(zip(vcpus, threads, strict=True))
    left = sorted(free - set(threads))
    reserved = frozenset(left[:reserve])
    return pinning, frozenset(threads) | reserved, reserved


def threads_per_core(host):
    """The most CPUs of one of the cell's cores within its shared and
    dedicated sets (what nova's sibling lists hold); 1 without siblings."""
    cpus = host.cpuset | host.pcpuset
    return max((len(frozenset(core) & cpus) for core in host.siblings), default=1) or 1


def smt_refuses_isolate(host):
    """Whether the cell refuses every ``isolate`` guest: it has hyper-threads
    and separate shared and dedicated sets (nova 34 keeps such guests off
    SMT hosts, bug 1889633; its one-set fallback layout takes whole cores)."""
    return threads_per_core(host) > 1 and host.cpuset != host.pcpuset


def _fullest_first(cores):
    # Siblings first: cores with the most free threads, then by lowest CPU.
    return sorted(cores, key=lambda core: (-len(core), min(core)))


def _prefer_counts(cores, wanted):
    """vCPUs per core (in ``_fullest_first`` order): fill cores in turn."""
    counts = []
    for core in _fullest_first(cores):
        take = min(len(core), wanted)
        counts.append(take)
        wanted -= take
    return counts


def _require_counts(cores, wanted):
    """vCPUs per core (in ``_fullest_first`` order): ``k`` on each core
    used, the last the remainder, on cores with at least ``k`` free threads,
    ``k`` >= 2 the largest that holds them all; None if none does (nova's
    ``require``: it never settles for a core with one free thread)."""
    order = _fullest_first(cores)
    for k in range(len(order[0]) if order else 0, 1, -1):
        able = sum(1 for core in order if len(core) >= k)  # a prefix of order
        if k * able >= wanted:
            counts = [0] * len(order)
            for i in range(able):
                counts[i] = min(k, wanted)
                wanted -= counts[i]
            return counts
    return None


def _isolate(host, vcpus, free, reserve):
    """Each vCPU alone on a wholly free core, which it takes whole; the
    emulator CPU from a free thread of another core, its free siblings
    taken with it."""
    if smt_refuses_isolate(host):
        return None
    width = threads_per_core(host)
    whole = sorted((c for c in host.cores() if len(c) == width and c <= free), key=min)
    if not vcpus or len(whole) < len(vcpus):
        return None  # nova takes an empty pinning for none
    used = whole[: len(vcpus)]
    taken = frozenset().union(*used) if used else frozenset()
    left = sorted(free - taken)
    if len(left) < reserve:
        return None
    reserved = frozenset(left[:reserve])
    with_siblings = frozenset().union(*(c for c in host.cores() if c & reserved)) & free
    pinning = tuple(zip(vcpus, (min(core) for core in used), strict=True))
    return pinning, taken | reserved | with_siblings, reserved
