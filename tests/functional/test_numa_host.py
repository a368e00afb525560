"""NUMA claims on a 2-socket host with huge pages, as rtagent's libvirt driver
reads it (``tests/functional/numa_host.py``), over a real store."""

import uuid

import pytest

from rtagent.tracker import errors
from rtagent.tracker.ledger import ResourcePolicy, inventories
from rtagent.tracker.model import Flavor
from rtagent.virt import errors as virt_errors
from tests.functional.numa_host import read_host
from tests.unit.helpers import make_tracker

pytestmark = pytest.mark.functional

GIB_PAGE = 1048576


@pytest.fixture(scope="module")
def host():
    return read_host()


@pytest.fixture
def tracker(tmp_path, host):
    tracker, store = make_tracker(tmp_path)
    tracker.update_host(host)
    yield tracker
    store.close()


def claim(tracker, vcpus, memory_mb, **specs):
    return tracker.instance_claim(str(uuid.uuid4()), Flavor(vcpus, memory_mb), extra_specs=specs)


def test_the_driver_reads_two_cells_of_sibling_threads_and_their_pages(host):
    assert [c.id for c in host.numa_cells] == [0, 1]
    cell0, cell1 = host.numa_cells
    assert cell0.cpu_ids == frozenset(range(8)) | frozenset(range(16, 24))
    assert cell1.cpu_ids == frozenset(range(8, 16)) | frozenset(range(24, 32))
    assert {c.id: c.siblings for c in cell0.cpus}[3] == frozenset({3, 19})
    assert dict(cell0.pages)[2048] == 4096 and dict(cell0.pages)[GIB_PAGE] == 8
    assert len(host.cpu_dedicated_set) == 24 and len(host.cpu_shared_set) == 8


def test_its_cpu_inventories_are_novas(host):
    invs = inventories(host, ResourcePolicy())
    assert invs["PCPU"].total == 24 and invs["PCPU"].allocation_ratio == 1.0
    assert invs["VCPU"].total == 8 and invs["VCPU"].allocation_ratio == 4.0


ISOLATE = {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"}


def test_isolated_guests_are_refused_on_a_host_with_hyper_threads(tracker):
    # As nova 34 (bug 1889633): its scheduler keeps isolate guests off SMT
    # hosts, and its fitter refuses them on a cell with thread siblings.
    why = r"cell 0: 12 free dedicated CPU.*no cell with hyper-threads \(as nova: bug 1889633\)"
    with pytest.raises(errors.ComputeResourcesUnavailable, match=why):
        claim(tracker, 2, 1024, **ISOLATE)
    # Nothing was taken: a pinned guest of the default policy still fits.
    assert len(claim(tracker, 2, 1024, **{"hw:cpu_policy": "dedicated"}).numa.pinned) == 2


def test_require_puts_vcpus_on_thread_siblings(tracker):
    placed = claim(
        tracker, 4, 1024, **{"hw:cpu_policy": "dedicated"}, **{"hw:cpu_thread_policy": "require"}
    )
    cpus = placed.numa.pinned
    assert len(cpus) == 4 and all((cpu + 16) % 32 in cpus for cpu in cpus)


def test_gigabyte_pages_are_counted_per_cell_with_the_reserved_ones_kept(tmp_path):
    host = read_host(reserved_huge_pages=((0, GIB_PAGE, 2),))
    policy = ResourcePolicy(reserved_host_memory_mb=0, reserved_huge_pages=((0, GIB_PAGE, 2),))
    tracker, store = make_tracker(tmp_path, policy)
    try:
        tracker.update_host(host)
        cells = [claim(tracker, 1, 1024, **{"hw:mem_page_size": "1GB"}) for _ in range(14)]
        assert sorted(c.numa.fits[0].host_cell for c in cells) == [0] * 6 + [1] * 8
        with pytest.raises(errors.ComputeResourcesUnavailable, match="0 free 1048576 KiB pages"):
            claim(tracker, 1, 1024, **{"hw:mem_page_size": "1GB"})
        # 2 MiB pages are another pool: still free.
        assert claim(tracker, 1, 1024, **{"hw:mem_page_size": "2MB"}).numa.fits[0].pagesize_kb
    finally:
        store.close()


def test_more_reserved_pages_than_the_cell_has_are_refused_by_the_audit():
    with pytest.raises(virt_errors.InvalidReservedHugePages, match="count"):
        read_host(reserved_huge_pages=((1, GIB_PAGE, 9),))


def test_guests_spread_over_the_cells(tracker):
    cells = [
        claim(tracker, 2, 1024, **{"hw:cpu_policy": "dedicated"}).numa.fits[0].host_cell
        for _ in range(4)
    ]
    assert sorted(cells) == [0, 0, 1, 1]


def test_a_live_migration_keeps_the_page_size_the_caller_names(tmp_path, host):
    # The documented recipe (docs/rpc-api.md, "Moves"): the destination is
    # told the source's page size; without it, "large" may pick another.
    source, source_store = make_tracker(tmp_path / "source")
    dest, dest_store = make_tracker(tmp_path / "dest")
    try:
        source.update_host(host)
        dest.update_host(host)
        inst = str(uuid.uuid4())
        flavor = Flavor(1, 2048)
        placed = source.instance_claim(inst, flavor, extra_specs={"hw:mem_page_size": "large"})
        size = placed.numa.fits[0].pagesize_kb
        assert size == GIB_PAGE
        # Fill the destination's 1 GiB pages: "large" would now land on 2 MiB.
        for _ in range(8):
            claim(dest, 1, 2048, **{"hw:mem_page_size": "1GB"})
        move = dict(source_node=source.node_uuid, dest_node=dest.node_uuid, old_flavor=flavor)
        with pytest.raises(errors.ComputeResourcesUnavailable, match="1048576"):
            dest.start_move(
                str(uuid.uuid4()),
                inst,
                "live-migration",
                **move,
                extra_specs={"hw:mem_page_size": str(size)},
            )
        anywhere = dest.start_move(
            str(uuid.uuid4()),
            inst,
            "live-migration",
            **move,
            extra_specs={"hw:mem_page_size": "large"},
        )
        assert anywhere.new_numa.fits[0].pagesize_kb == 2048
    finally:
        source_store.close()
        dest_store.close()


def test_without_cpu_sets_a_cells_shared_cpus_are_its_online_ones(tmp_path):
    # The test driver's own host: 2 cells of 8 CPUs, of which 0, 2, 4 online.
    from rtagent.numa.usage import host_cells
    from rtagent.virt.libvirt.driver import LibvirtDriver

    driver = LibvirtDriver("test:///default", str(tmp_path))
    try:
        view = driver.read_host()
    finally:
        driver.close()
    assert view.online_cpus == {0, 2, 4}
    cells = host_cells(view.numa_cells, online=view.online_cpus)
    assert [c.cpuset for c in cells] == [{0, 2, 4}, set()]
    assert all(not c.pcpuset for c in cells)


def test_the_view_trims_siblings_to_the_cpu_sets_and_says_socket_and_networks(tmp_path):
    """As nova's libvirt driver reports the cells (issue 32): a core's
    threads outside both CPU sets are left out, a lone one kept; nova's
    filters read ``socket`` (the PCI socket policy) and
    ``network_metadata``."""
    from rtagent.numa.view import numa_topology

    tracker, store = make_tracker(tmp_path)
    try:
        snap = tracker.update_host(read_host(dedicated="2,4,6,8,26,28", shared="0,1,16,17"))
    finally:
        store.close()
    cells = numa_topology(snap.numa_cells)["cells"]
    assert [c["siblings"] for c in cells] == [
        [[0, 16], [1, 17], [2], [4], [6]],
        [[8], [26], [28]],
    ]
    assert [c["socket"] for c in cells] == [0, 1]
    assert all(c["network_metadata"] == {"physnets": [], "tunneled": False} for c in cells)
