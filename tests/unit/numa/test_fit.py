"""The fitter's rules case by case (the oracle test covers them at random)."""

import pytest

from rtagent.numa import fit, model
from rtagent.numa.model import GuestCell, HostCell, Limits, Pages


def cell(cell_id, cpus, pinned=(), threads=1, shared=(), memory=4096, pages=(), **kw):
    cpus = sorted(cpus)
    siblings = tuple(frozenset(cpus[i : i + threads]) for i in range(0, len(cpus), threads))
    return HostCell(
        id=cell_id,
        cpuset=frozenset(shared),
        pcpuset=frozenset(cpus),
        memory_mb=memory,
        siblings=siblings,
        pinned=frozenset(pinned),
        pages=pages,
        **kw,
    )


def guest(cell_id, pcpus=(), cpus=(), memory=512, **kw):
    return GuestCell(
        id=cell_id, memory_mb=memory, pcpuset=frozenset(pcpus), cpuset=frozenset(cpus), **kw
    )


def test_the_asymmetric_case_nova_misses_fits():
    # 3 cells of 4 dedicated CPUs with 3, 0 and 2 pinned; a 4-vCPU guest
    # with hw:numa_nodes=2, hw:numa_cpus.0=0, hw:numa_cpus.1=1-3.
    hosts = (
        cell(0, range(0, 4), pinned={0, 1, 2}),
        cell(1, range(4, 8)),
        cell(2, range(8, 12), pinned={8, 9}),
    )
    found = fit.fit(hosts, (guest(0, {0}), guest(1, {1, 2, 3})))
    assert found is not None
    assert [f.host_cell for f in found] == [2, 1]
    assert found[0].pinning == ((0, 10),)
    assert found[1].pinning == ((1, 4), (2, 5), (3, 6))


def test_no_fit_when_a_guest_cell_fits_no_free_cell():
    hosts = (cell(0, range(4), pinned={0, 1, 2}), cell(1, range(4, 8), pinned={4, 5, 6}))
    assert fit.fit(hosts, (guest(0, {0, 1}),)) is None
    assert fit.fit(hosts[:1], (guest(0, {0}), guest(1, {1}))) is None  # more cells than the host


@pytest.mark.parametrize(
    ("policy", "pinned", "wanted", "expected"),
    [
        # prefer: siblings first, the fullest cores first.
        (model.PREFER, {0}, 2, ((0, 2), (1, 3))),
        (model.PREFER, {0}, 3, ((0, 2), (1, 3), (2, 4))),
        # isolate: nova 34 keeps it off cells with hyper-threads.
        (model.ISOLATE, set(), 1, None),
        # require: k vCPUs to a core (k >= 2), the last core the rest, on
        # cores with k free threads; never a core with one free thread.
        (model.REQUIRE, set(), 3, ((0, 0), (1, 1), (2, 2))),
        (model.REQUIRE, {0, 2, 4}, 2, None),
        (model.REQUIRE, {0, 2, 4}, 1, None),
        (model.REQUIRE, {0}, 1, ((0, 2),)),
    ],
)
def test_thread_policies(policy, pinned, wanted, expected):
    host = cell(0, range(6), pinned=pinned, threads=2)
    found = fit.fit_cell(host, guest(0, range(wanted), thread_policy=policy))
    assert (found.pinning if found else None) == expected


# The two differences from nova 34 of issue 32, as they were found.


def test_isolate_on_a_core_with_a_free_sibling_is_refused_as_nova_does():
    # core [0, 1] free, 1 vCPU isolate: nova none (rtagent once {0: 0}).
    host = cell(0, range(2), threads=2)
    assert fit.fit((host,), (guest(0, {0}, thread_policy=model.ISOLATE),)) is None


def test_require_puts_no_lone_vcpu_beside_another_guests_thread():
    # cores [0, 1] with 0 pinned and [2, 3] with 3 pinned, 1 vCPU require:
    # nova none (rtagent once {0: 1}).
    host = cell(0, range(4), pinned={0, 3}, threads=2)
    assert fit.fit((host,), (guest(0, {0}, thread_policy=model.REQUIRE),)) is None


@pytest.mark.parametrize(
    ("pinned", "wanted", "expected"),
    [
        # One vCPU per wholly free core, which it takes whole.
        ({0}, 2, ((0, 2), (1, 4))),
        ({0, 2}, 2, None),
    ],
)
def test_isolate_on_hyperthreads_with_one_set_for_both(pinned, wanted, expected):
    # nova's layout before cpu_dedicated_set (shared set = dedicated set):
    # nova pins one thread of a free core and takes its siblings.
    host = cell(0, range(6), pinned=pinned, threads=2, shared=range(6))
    found = fit.fit_cell(host, guest(0, range(wanted), thread_policy=model.ISOLATE))
    assert (found.pinning if found else None) == expected


def test_isolate_takes_whole_cores():
    host = cell(0, range(6), pinned={0}, threads=2, shared=range(6))
    found = fit.fit_cell(host, guest(0, {0, 1}, thread_policy=model.ISOLATE))
    assert found.taken == {2, 3, 4, 5}


def test_isolate_without_hyperthreads():
    host = cell(0, range(4), pinned={1}, threads=1)
    found = fit.fit_cell(host, guest(0, {0, 1}, thread_policy=model.ISOLATE), reserve=1)
    assert found.pinning == ((0, 0), (1, 2)) and found.reserved == {3}


def test_a_shared_thread_makes_the_cell_smt_for_isolate():
    # Cores [0, 1] and [2, 3], 1 and 3 in cpu_shared_set: nova's sibling
    # lists keep the pairs, so nova refuses isolate though no two dedicated
    # CPUs are siblings.
    host = HostCell(
        id=0,
        cpuset=frozenset({1, 3}),
        pcpuset=frozenset({0, 2}),
        memory_mb=4096,
        siblings=(frozenset({0, 1}), frozenset({2, 3})),
    )
    assert fit.fit_cell(host, guest(0, {0}, thread_policy=model.ISOLATE)) is None
    assert fit.fit_cell(host, guest(0, {0}, thread_policy=model.PREFER))


def test_require_uses_the_same_number_of_threads_on_each_core():
    # Free cores of 3 and 2 threads: 5 vCPUs would need 3 + 2, and nova
    # places k to a core (3 on one core, or 2 on two): no fit.
    host = HostCell(
        id=0,
        cpuset=frozenset(),
        pcpuset=frozenset(range(7)),
        memory_mb=4096,
        siblings=(frozenset({0, 1, 2}), frozenset({3, 4, 5, 6})),
        pinned=frozenset({6, 5}),
    )
    assert fit.fit_cell(host, guest(0, range(5), thread_policy=model.REQUIRE)) is None
    found = fit.fit_cell(host, guest(0, range(4), thread_policy=model.REQUIRE))
    assert found.pinning == ((0, 0), (1, 1), (2, 3), (3, 4))


def test_require_needs_hyperthreading():
    host = cell(0, range(4), threads=1)
    assert fit.fit_cell(host, guest(0, {0, 1}, thread_policy=model.REQUIRE)) is None


@pytest.mark.parametrize(
    ("policy", "threads", "pinned", "fits"),
    [
        # A cell of a mixed guest with no pinned vCPU of its own still
        # obeys the guest's thread policy, as nova.
        (model.PREFER, 2, {0, 2}, True),
        (model.REQUIRE, 2, {0, 2}, False),  # no core with two free threads
        (model.REQUIRE, 2, {0}, True),
        (model.ISOLATE, 1, set(), False),  # nova: no pinning, refused
    ],
)
def test_a_mixed_cell_without_pinned_vcpus(policy, threads, pinned, fits):
    host = cell(0, range(4), pinned=pinned, threads=threads, shared={8, 9})
    shared_only = guest(1, cpus={1}, thread_policy=policy)
    found = fit.fit_cell(host, shared_only, policy=fit.MIXED)
    assert (found is not None) == fits
    if found:
        assert found.pinning == () and found.taken == frozenset()


def test_a_mixed_cell_counts_its_memory_as_pinned():
    host = cell(0, range(4), shared={8}, memory=1024, memory_usage=768)
    shared_only = guest(0, cpus={0}, memory=512)
    assert fit.fit_cell(host, shared_only, policy=fit.SHARED)
    assert fit.fit_cell(host, shared_only, policy=fit.MIXED) is None


def test_emulator_threads_need_a_pinned_vcpu_in_the_first_cell():
    # As nova: a mixed guest whose first cell has only shared vCPUs gets no
    # emulator CPU, anywhere.
    hosts = (cell(0, range(4), shared={8}), cell(1, range(4, 8), shared={9}))
    guests = (guest(0, cpus={0}), guest(1, {1}))
    assert fit.fit(hosts, guests) is not None
    assert fit.fit(hosts, guests, emulator_isolate=True) is None
    assert fit.fit(hosts, guests[::-1], emulator_isolate=True) is not None


def test_the_emulator_threads_take_one_more_cpu_of_the_first_cell_only():
    hosts = (cell(0, range(2)), cell(1, range(2, 4)))
    guests = (guest(0, {0}), guest(1, {1, 2}))
    found = fit.fit(hosts, guests, emulator_isolate=True)
    assert [f.reserved for f in found] == [frozenset({1}), frozenset()]
    assert found[0].taken == {0, 1}
    # Without room for it, no fit.
    assert fit.fit(hosts, (guest(0, {0, 1}), guest(1, {2, 3})), emulator_isolate=True) is None


PAGES = (Pages(4, 262144), Pages(2048, 512, used=256), Pages(1048576, 1))


@pytest.mark.parametrize(
    ("request_", "memory", "size"),
    [
        (model.PAGES_LARGE, 1024, 1048576),
        (model.PAGES_LARGE, 512, 2048),  # 512 MiB is not a whole 1 GiB page
        (model.PAGES_ANY, 256, 2048),
        (model.PAGES_SMALL, 512, 4),
        (2048, 512, 2048),
        (2048, 1024, None),  # 256 free 2 MiB pages hold 512 MiB
        (1048576, 2048, None),  # one 1 GiB page
    ],
)
def test_page_sizes(request_, memory, size):
    host = cell(0, range(4), pages=PAGES)
    found = fit.fit_cell(host, guest(0, {0}, memory=memory, pagesize=request_))
    assert (found.pagesize_kb if found else None) == size


def test_shared_cpus_within_the_ratio_and_never_more_than_the_cell_has():
    host = HostCell(id=0, cpuset=frozenset(range(4)), pcpuset=frozenset(), memory_mb=4096)
    busy = HostCell(
        id=0, cpuset=frozenset(range(4)), pcpuset=frozenset(), memory_mb=4096, cpu_usage=15
    )
    assert fit.fit_cell(host, guest(0, cpus=range(5))) is None  # more than the cell
    assert fit.fit_cell(busy, guest(0, cpus=range(2)), Limits(cpu_allocation_ratio=4.0)) is None
    assert fit.fit_cell(busy, guest(0, cpus=range(1)), Limits(cpu_allocation_ratio=4.0))
    assert fit.fit_cell(busy, guest(0, cpus=range(2)), Limits(cpu_allocation_ratio=8.0))
    assert fit.fit_cell(busy, guest(0, cpus=range(2)))  # no limits: usage not checked


@pytest.mark.parametrize(("pack", "first"), [(False, 1), (True, 0)])
def test_spread_by_default_pack_by_option(pack, first):
    hosts = (cell(0, range(4), pinned={0, 1}), cell(1, range(4, 8)))
    (found,) = fit.fit(hosts, (guest(0, {0}),), pack=pack)
    assert found.host_cell == first
