"""Fit a guest's NUMA cells onto a host's: exact, deterministic, pure.

nova's semantics (``nova/virt/hardware.py``: ``numa_fit_instance_to_host``
and the cell fit it calls), with the searches made exact: a fit is found
whenever one exists under the rules below, and the inputs are never
changed (nova's fitter caches by a cell id it overwrites while fitting, and
misses valid fits when guest cells differ in size).

Rules for one guest cell on one host cell:

- **Memory**, without a page request: with page sizes known, the host's
  smallest page size must hold the cell's memory (free pages for a cell
  with pinned vCPUs, all pages otherwise: shared guests may overcommit each
  other, never themselves); without page sizes, the cell's memory must be
  free (pinned) or within the cell's memory (shared). With a page request
  (small, large, any or a size), the largest allowed page size whose free
  pages hold the memory exactly (a whole number of pages) is chosen; pages
  never overcommit.
- **Shared vCPUs** (``cpuset``): no more than the host cell's shared CPUs;
  with limits, the cell's shared usage stays within ``cpu_allocation_ratio``
  times its shared CPUs, and its small-page memory within
  ``ram_allocation_ratio`` times its memory.
- **Pinned vCPUs** (``pcpuset``), each on a distinct free dedicated CPU:
  ``prefer`` takes any; ``isolate`` puts each vCPU on a core whose threads
  are all free, and takes the whole core; ``require`` needs a cell with
  hyper-threading and places vCPUs on thread siblings: every core used holds
  at least two of the cell's vCPUs, except one core that may hold one when
  their number is odd.
- **Emulator threads** (``emulator_isolate``): one more free dedicated CPU
  on the host cell of the guest's first cell, not on a core an ``isolate``
  cell took, reserved.

Guest cells go to distinct host cells. Host cells are tried least used
first (nova's default, spreading guests) or most used first (``pack``, nova's
``packing_host_numa_cells_allocation_strategy``); among equally used cells,
by id. The first complete fit in that order is returned.
"""

import itertools

from rtagent.numa import model

_NO_LIMITS = None


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
        the guest's order (the first takes the emulator threads' CPU).
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
    found = {}

    def cell(host, index):
        reserve = 1 if emulator_isolate and index == 0 else 0
        key = (host.id, index)
        if key not in found:
            found[key] = fit_cell(host, guests[index], limits, reserve)
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


def fit_cell(host, guest, limits=_NO_LIMITS, reserve=0):
    """One guest cell on one host cell, or None (see the module's rules).

    :param reserve: dedicated CPUs to reserve for the emulator threads.
    """
    pinned = bool(guest.pcpuset)
    pagesize = _pages(host, guest, pinned)
    if pagesize is False:
        return None
    if guest.cpuset and not _shared_fits(host, guest, limits):
        return None
    pinning, taken, reserved = (), frozenset(), frozenset()
    if pinned or reserve:
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
    cores = [core & free for core in host.cores() if core & free]
    # The thread policy is about pinned vCPUs: with none, only a reserve.
    policy = guest.thread_policy if vcpus else model.PREFER
    if policy == model.ISOLATE:
        return _isolate(host, vcpus, free, reserve)
    if policy == model.REQUIRE:
        if not host.has_smt:
            return None
        counts = _require_counts(cores, len(vcpus))
        if counts is None:
            return None
    else:
        counts = _prefer_counts(cores, len(vcpus))
    order = _fullest_first(cores)
    threads = []
    for core, count in zip(order, counts, strict=True):
        threads.extend(sorted(core)[:count])
    pinning = tuple(zip(vcpus, threads, strict=True))
    left = sorted(free - set(threads))
    reserved = frozenset(left[:reserve])
    return pinning, frozenset(threads) | reserved, reserved


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
    """vCPUs per core (in ``_fullest_first`` order) so that every used core
    holds at least two, except one core holding one when ``wanted`` is odd;
    None if no such split exists. Exact: a table of the sums reachable over
    the cores, with or without the single one, then the split read back
    taking as many as possible from the fullest cores."""
    order = _fullest_first(cores)
    lone_allowed = wanted % 2 == 1
    # reach[i] = {(total, lone_used)} reachable from cores i.. onwards.
    reach = [set() for _ in range(len(order) + 1)]
    reach[len(order)] = {(0, False)}
    for i in range(len(order) - 1, -1, -1):
        options = _require_options(len(order[i]), lone_allowed)
        for total, lone in reach[i + 1]:
            for take, is_lone in options:
                if is_lone and lone:
                    continue
                if total + take <= wanted:
                    reach[i].add((total + take, lone or is_lone))
    if not any((wanted, lone) in reach[0] for lone in (False, True)):
        return None
    counts, need, lone = [], wanted, False
    for i, core in enumerate(order):
        for take, is_lone in sorted(_require_options(len(core), lone_allowed), key=lambda o: -o[0]):
            if is_lone and lone:
                continue
            rest = need - take
            if rest < 0:
                continue
            if any((rest, done) in reach[i + 1] for done in _lone_states(lone or is_lone)):
                counts.append(take)
                need, lone = rest, lone or is_lone
                break
    return counts


def _require_options(free_threads, lone_allowed):
    """(vCPUs on the core, whether it is the single one) a core may take."""
    options = [(0, False)]
    options.extend((n, False) for n in range(2, free_threads + 1))
    if lone_allowed:
        options.append((1, True))
    return options


def _lone_states(lone_used):
    # Cores further on may use the single one only if it is still unused.
    return (False,) if lone_used else (False, True)


def _isolate(host, vcpus, free, reserve):
    """Each vCPU alone on a wholly free core, which it takes whole; the
    emulator CPU from a free thread of another core. Smallest cores first,
    so that the most threads stay free for the reservation."""
    whole = [core for core in host.cores() if core <= free]
    if len(whole) < len(vcpus):
        return None
    used = sorted(whole, key=lambda core: (len(core), min(core)))[: len(vcpus)]
    taken = frozenset().union(*used) if used else frozenset()
    left = sorted(free - taken)
    if len(left) < reserve:
        return None
    reserved = frozenset(left[:reserve])
    pinning = tuple(zip(vcpus, (min(core) for core in sorted(used, key=min)), strict=True))
    return pinning, taken | reserved, reserved
