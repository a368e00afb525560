"""The fitter against a brute-force oracle on small hosts (up to 4 cells of
8 CPUs with siblings, several page sizes): it finds a fit if and only if
one exists, and every fit it returns obeys the rules (rtagent.numa.fit's
docstring), written here again from their statement, not from the code.

The examples are derandomized, so that a run on CI is the run made here;
wider random exploration: ``benchmarks/numa_fit.py --cases N`` or these
strategies with ``derandomize`` off (20,000 random cases agreed when they
were written).
"""

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.numa import fit, model

SIZES = (4, 2048, 1048576)


@st.composite
def host_cells(draw):
    count = draw(st.integers(1, 4))
    cells = []
    cpu = 0
    for cell_id in range(count):
        threads = draw(st.sampled_from((1, 2, 4)))
        cores = draw(st.integers(1, 8 // threads))
        siblings = tuple(
            frozenset(range(cpu + c * threads, cpu + (c + 1) * threads)) for c in range(cores)
        )
        cpus = frozenset().union(*siblings)
        cpu += len(cpus)
        split = draw(st.sampled_from(("dedicated", "dedicated", "mixed", "shared", "legacy")))
        if split in ("dedicated", "legacy"):
            dedicated = cpus
        elif split == "shared":
            dedicated = frozenset()
        else:
            dedicated = frozenset(draw(st.sets(st.sampled_from(sorted(cpus)))))
        # legacy: nova's layout before cpu_dedicated_set, one set for both.
        shared = cpus if split == "legacy" else cpus - dedicated
        pinned = frozenset()
        if dedicated:
            pinned = frozenset(
                draw(st.sets(st.sampled_from(sorted(dedicated)), max_size=len(dedicated) // 2))
            )
        memory = draw(st.sampled_from((1024, 2048, 4096)))
        pages = ()
        if draw(st.booleans()):
            huge = draw(st.sampled_from((0, 2, 128, 256)))
            small_total = memory * 1024 // 4 - huge * 512
            pages = (
                model.Pages(4, small_total, draw(st.integers(0, small_total // 2))),
                model.Pages(2048, huge, draw(st.integers(0, huge))),
            )
        cells.append(
            model.HostCell(
                id=cell_id,
                cpuset=shared,
                pcpuset=dedicated,
                memory_mb=memory,
                siblings=siblings,
                pinned=pinned,
                cpu_usage=draw(st.integers(0, 4)),
                memory_usage=draw(st.sampled_from((0, 0, 256, 1024))),
                pages=pages,
            )
        )
    return tuple(cells)


@st.composite
def guest_cells(draw, most=3):
    count = draw(st.integers(1, most))
    cells, vcpu = [], 0
    for cell_id in range(count):
        shared = draw(st.integers(0, 2))
        pinned = draw(st.sampled_from((0, 1, 2, 2, 3, 4)))
        if shared + pinned == 0:
            shared = 1
        cells.append(
            model.GuestCell(
                id=cell_id,
                memory_mb=draw(st.sampled_from((256, 512, 1024))),
                cpuset=frozenset(range(vcpu, vcpu + shared)),
                pcpuset=frozenset(range(vcpu + shared, vcpu + shared + pinned)),
                pagesize=draw(st.sampled_from((None, None, "small", "large", "any", 2048))),
                thread_policy=draw(st.sampled_from(model.THREAD_POLICIES)),
            )
        )
        vcpu += shared + pinned
    return tuple(cells)


@st.composite
def cases(draw):
    """(host cells, guest cells): mostly no more guest cells than host cells."""
    hosts = draw(host_cells())
    return hosts, draw(guest_cells(most=min(3, len(hosts) + draw(st.sampled_from((0, 0, 0, 1))))))


limits = st.one_of(
    st.none(),
    st.builds(
        model.Limits,
        cpu_allocation_ratio=st.sampled_from((1.0, 4.0)),
        ram_allocation_ratio=st.sampled_from((1.0, 1.5)),
    ),
)


# -- the rules, stated again ---------------------------------------------------


def cores_of(host):
    listed = [frozenset(c) & host.pcpuset for c in host.siblings]
    return [c for c in listed if c]


def page_sizes_allowed(host, request):
    sizes = [p.size_kb for p in host.pages]
    if request is None or not sizes:
        return []
    return {
        "small": sizes[:1],
        "large": sizes[1:],
        "any": sizes,
    }.get(request, [request] if request in sizes else [])


def pages_ok(host, size, memory_mb, use_free):
    page = next(p for p in host.pages if p.size_kb == size)
    kb = memory_mb * 1024
    return kb % size == 0 and kb <= (page.total - page.used if use_free else page.total) * size


def guest_policy(guests):
    """nova's hw:cpu_policy, from all the guest's cells."""
    if not any(g.pcpuset for g in guests):
        return "shared"
    return "mixed" if any(g.cpuset for g in guests) else "dedicated"


def memory_ok(host, guest, pinned):
    if guest.pagesize is not None:
        return any(
            pages_ok(host, s, guest.memory_mb, True)
            for s in page_sizes_allowed(host, guest.pagesize)
        )
    if host.pages:
        return pages_ok(host, host.pages[0].size_kb, guest.memory_mb, pinned)
    limit = host.memory_mb - host.memory_usage if pinned else host.memory_mb
    return guest.memory_mb <= limit


def shared_ok(host, guest, lim, policy):
    if policy == "dedicated":
        return True
    n = len(guest.cpuset)
    if n > len(host.cpuset):
        return False
    if lim is None:
        return True
    return (
        host.cpu_usage + n <= len(host.cpuset) * lim.cpu_allocation_ratio
        and host.memory_usage + guest.memory_mb <= host.memory_mb * lim.ram_allocation_ratio
    )


def width(host):
    """Threads per core as nova's sibling lists count them: within the
    cell's shared and dedicated CPUs."""
    cpus = host.cpuset | host.pcpuset
    return max([len(frozenset(c) & cpus) for c in host.siblings] + [1])


def policy_ok(host, guest, chosen, reserved):
    """Whether the pCPUs ``chosen`` for the pinned vCPUs and ``reserved``
    for the emulator threads obey nova's thread policy for a pinned cell;
    the pCPUs the cell then takes, or None."""
    free = host.pcpuset - host.pinned
    if not chosen <= free or not reserved <= free or chosen & reserved:
        return None
    if reserved and not chosen:
        return None  # nova: no emulator CPU without a pinned vCPU beside it
    cores = cores_of(host)
    if guest.thread_policy == model.ISOLATE:
        if width(host) > 1 and host.cpuset != host.pcpuset:
            return None  # bug 1889633: no isolate guest on an SMT cell
        whole = [c for c in cores if len(c) == width(host) and c <= free]
        used = [c for c in cores if c & chosen]
        if not chosen or any(len(c & chosen) > 1 or c not in whole for c in used):
            return None  # nova: a cell with no pinned vCPU has no isolate pinning
        if any(c & reserved for c in used):
            return None
        taken = frozenset().union(chosen, reserved, *used)
        return taken | frozenset().union(*(c & free for c in cores if c & reserved))
    if guest.thread_policy == model.REQUIRE:
        # k vCPUs on every core used but one (which holds 1 to k), k >= 2,
        # each used core with k free threads or more; a core with k free
        # threads even when there is no vCPU.
        counts = [(len(c & chosen), len(c & free)) for c in cores if c & free]
        used = [(n, f) for n, f in counts if n]
        if not any(
            any(f >= k for _, f in counts)
            and all(f >= k for _, f in used)
            and sum(1 for n, _ in used if n != k) <= 1
            and all(n <= k for n, _ in used)
            for k in range(2, 9)
        ):
            return None
    return chosen | reserved


def cell_fits(host, guest, lim, reserve, policy):
    pinned = policy != "shared"
    if not memory_ok(host, guest, pinned) or not shared_ok(host, guest, lim, policy):
        return False
    if not pinned:
        return True
    n = len(guest.pcpuset)
    free = sorted(host.pcpuset - host.pinned)
    for chosen in itertools.combinations(free, n):
        rest = sorted(set(free) - set(chosen))
        for reserved in itertools.combinations(rest, reserve):
            if policy_ok(host, guest, frozenset(chosen), frozenset(reserved)) is not None:
                return True
    return False


def exists(hosts, guests, lim, emulator):
    """Whether some assignment of guest cells to distinct host cells fits."""
    policy = guest_policy(guests)
    fits = {
        (h, i): cell_fits(hosts[h], g, lim, 1 if emulator and i == 0 else 0, policy)
        for h in range(len(hosts))
        for i, g in enumerate(guests)
    }
    return any(
        all(fits[h, i] for i, h in enumerate(chosen))
        for chosen in itertools.permutations(range(len(hosts)), len(guests))
    )


def check_fit(hosts, guests, lim, emulator, found):
    by_id = {h.id: h for h in hosts}
    policy = guest_policy(guests)
    assert len({f.host_cell for f in found}) == len(guests)
    for i, (guest, placed) in enumerate(zip(guests, found, strict=True)):
        host = by_id[placed.host_cell]
        assert placed.guest_cell == guest.id
        vcpus = [v for v, _ in placed.pinning]
        pcpus = [p for _, p in placed.pinning]
        assert vcpus == sorted(guest.pcpuset)
        assert len(set(pcpus)) == len(pcpus)  # never one CPU twice
        assert len(placed.reserved) == (1 if emulator and i == 0 and policy != "shared" else 0)
        if policy != "shared":
            taken = policy_ok(host, guest, frozenset(pcpus), placed.reserved)
            assert taken is not None
            assert placed.taken == taken
        assert shared_ok(host, guest, lim, policy)
        if guest.pagesize is None:
            assert placed.pagesize_kb is None and memory_ok(host, guest, policy != "shared")
        else:
            assert placed.pagesize_kb in page_sizes_allowed(host, guest.pagesize)
            assert pages_ok(host, placed.pagesize_kb, guest.memory_mb, True)


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cases(), limits, st.booleans(), st.booleans())
def test_a_fit_is_found_if_and_only_if_one_exists(case, lim, emulator, pack):
    hosts, guests = case
    found = fit.fit(hosts, guests, lim, emulator_isolate=emulator, pack=pack)
    assert (found is not None) == exists(hosts, guests, lim, emulator)
    if found is not None:
        check_fit(hosts, guests, lim, emulator, found)


@settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(cases(), limits)
def test_the_inputs_are_unchanged_and_the_answer_is_the_same_twice(case, lim):
    hosts, guests = case
    before = (repr(hosts), repr(guests))
    first = fit.fit(hosts, guests, lim)
    assert (repr(hosts), repr(guests)) == before
    assert fit.fit(hosts, guests, lim) == first


@st.composite
def one_cell(draw):
    """A host cell of cores of 1 to 4 threads, some pinned, and a guest cell
    of pinned vCPUs under one thread policy: the thread rules' edge cases
    (cores with an odd number of free threads, a lone vCPU) come often."""
    cores, cpu = [], 0
    for _ in range(draw(st.integers(1, 4))):
        size = draw(st.integers(1, 4))
        cores.append(frozenset(range(cpu, cpu + size)))
        cpu += size
    cpus = frozenset().union(*cores)
    pinned = frozenset(draw(st.sets(st.sampled_from(sorted(cpus)), max_size=len(cpus) - 1)))
    legacy = draw(st.booleans())  # one set for both, as before cpu_dedicated_set
    host = model.HostCell(
        id=0,
        cpuset=cpus if legacy else frozenset(),
        pcpuset=cpus,
        memory_mb=4096,
        siblings=tuple(cores),
        pinned=pinned,
    )
    guest = model.GuestCell(
        id=0,
        memory_mb=512,
        pcpuset=frozenset(range(draw(st.integers(1, 6)))),
        thread_policy=draw(st.sampled_from(model.THREAD_POLICIES)),
    )
    return (host,), (guest,)


@settings(
    max_examples=1500, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(one_cell(), st.booleans())
def test_thread_policies_on_one_cell_against_the_oracle(case, emulator):
    hosts, guests = case
    found = fit.fit(hosts, guests, None, emulator_isolate=emulator)
    assert (found is not None) == exists(hosts, guests, None, emulator)
    if found is not None:
        check_fit(hosts, guests, None, emulator, found)
