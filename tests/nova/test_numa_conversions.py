"""NUMA between nova's objects and the agent (rtagent.nova.numa), with
nova's own objects and helpers as the reference, no mocks.

- the host: a virt driver's ``numa_topology`` and nova.conf's CPU sets ->
  the agent's host view -> the cells and inventories the agent derives are
  the ones nova's libvirt driver reports;
- a claim's reply -> the ``InstanceNUMATopology`` nova's own fit returns;
- the view's cells -> ``ComputeNode.numa_topology``, which nova's fit (the
  NUMATopologyFilter's) reads back with its usage.

Run by ``make test-nova`` in .venv-nova.
"""

import pytest
from nova import objects
from nova.conf import CONF
from nova.virt import hardware

from rtagent.nova import hostdriver, numa
from rtagent.numa import usage as numa_usage
from rtagent.numa import view as numa_view
from rtagent.resources import PCPU
from rtagent.tracker import ledger
from rtagent.tracker.model import VCPU
from rtagent.virt import hugepages

objects.register_all()


def driver_topology(shared, dedicated, reserved_2m=0):
    """What nova's libvirt driver reports for a 2-cell host, 2 cores x 2
    threads per cell (CPUs 0-3, 4-7), 4K and 2M pages."""
    cells = []
    for cell_id, cpus in ((0, {0, 1, 2, 3}), (1, {4, 5, 6, 7})):
        lo = min(cpus)
        cells.append(
            objects.NUMACell(
                id=cell_id,
                socket=cell_id,
                cpuset=cpus & shared,
                pcpuset=cpus & dedicated,
                memory=4096,
                cpu_usage=0,
                memory_usage=0,
                pinned_cpus=set(),
                siblings=[s & (shared | dedicated) for s in ({lo, lo + 2}, {lo + 1, lo + 3})],
                mempages=[
                    objects.NUMAPagesTopology(size_kb=4, total=524288, used=0, reserved=0),
                    objects.NUMAPagesTopology(
                        size_kb=2048, total=1024, used=0, reserved=reserved_2m if cell_id else 0
                    ),
                ],
                network_metadata=objects.NetworkMetadata(
                    physnets={"foo"} if cell_id == 0 else set(), tunneled=cell_id == 1
                ),
            )
        )
    return objects.NUMATopology(cells=cells)


def resources(topology, vcpus):
    return {
        "vcpus": vcpus,
        "memory_mb": 8192,
        "local_gb": 100,
        "cpu_info": "{}",
        "uuid": "36b4766e-b5b6-45b3-b228-40fbf588fccf",
        "numa_topology": topology._to_json(),
    }


@pytest.fixture
def conf():
    yield CONF
    for name in ("cpu_shared_set", "cpu_dedicated_set"):
        CONF.clear_override(name, group="compute")
    CONF.clear_override("vcpu_pin_set")
    CONF.clear_override("reserved_huge_pages")


def test_host_cells_from_the_drivers_numa_topology():
    cells = numa.host_cells(driver_topology({0, 1, 4, 5}, {2, 3, 6, 7})._to_json())
    assert [c.id for c in cells] == [0, 1]
    cell = cells[1]
    assert cell.memory_mb == 4096
    assert cell.pages == ((4, 524288), (2048, 1024))
    assert cell.cpu_ids == {4, 5, 6, 7}
    assert {c.id: c.siblings for c in cell.cpus} == {
        4: {4, 6},
        5: {5, 7},
        6: {4, 6},
        7: {5, 7},
    }
    assert {c.socket_id for c in cell.cpus} == {1}
    assert numa.host_cells(None) == ()


def test_cpus_in_neither_set_are_left_out():
    # nova's driver leaves CPUs 3 and 7 out of every set and sibling list.
    cells = numa.host_cells(driver_topology({0, 4}, {1, 2, 5, 6}))
    assert [c.cpu_ids for c in cells] == [{0, 1, 2}, {4, 5, 6}]
    assert {c.id: c.siblings for c in cells[0].cpus} == {0: {0, 2}, 1: {1}, 2: {0, 2}}


@pytest.mark.parametrize(
    "shared_opt, dedicated_opt, shared, dedicated, vcpus",
    [
        ("0,1,4,5", "2,3,6,7", {0, 1, 4, 5}, {2, 3, 6, 7}, 4),
        (None, "0-7", set(), set(range(8)), 0),
        ("0-7", None, set(range(8)), set(), 8),
    ],
)
def test_the_agents_cells_and_inventories_are_the_drivers(
    conf, shared_opt, dedicated_opt, shared, dedicated, vcpus
):
    conf.set_override("cpu_shared_set", shared_opt, group="compute")
    conf.set_override("cpu_dedicated_set", dedicated_opt, group="compute")
    topology = driver_topology(shared, dedicated)
    view = hostdriver.view_of("node", resources(topology, vcpus), cpu_sets=numa.cpu_sets(conf))
    # nova's libvirt driver: VCPU is the shared set, PCPU the dedicated set.
    totals = ledger.host_totals(view)
    assert totals[VCPU] == vcpus
    assert totals[PCPU] == len(dedicated)
    # The cells the agent offers are the ones the driver reports.
    offered = numa_view.numa_topology(
        numa_usage.host_cells(view.numa_cells, view.cpu_shared_set, view.cpu_dedicated_set)
    )
    for mine, novas in zip(offered["cells"], topology.cells, strict=True):
        assert set(mine["cpuset"]) == novas.cpuset
        assert set(mine["pcpuset"]) == novas.pcpuset
        assert sorted(map(sorted, mine["siblings"])) == sorted(map(sorted, novas.siblings))
        assert [(p["size_kb"], p["total"]) for p in mine["mempages"]] == [
            (p.size_kb, p.total) for p in novas.mempages
        ]


def _novas_fallback(vcpu_pin_set, shared_opt, dedicated_opt):
    """nova 34's libvirt driver (``_get_host_numa_topology``): with no
    dedicated CPU, the shared ones are offered for pinning too unless
    ``cpu_shared_set`` alone is set."""
    return not dedicated_opt and not (shared_opt and not vcpu_pin_set)


@pytest.mark.parametrize(
    "vcpu_pin_set, shared_opt, dedicated_opt, disabled, shared, dedicated",
    [
        (None, None, None, False, set(range(8)), set()),
        ("0-5", None, None, False, set(range(6)), set()),
        ("0-5", "0-3", None, False, set(range(6)), set()),
        (None, "0,1,4,5", None, False, {0, 1, 4, 5}, set()),
        (None, "0,1,4,5", "2,3,6,7", False, {0, 1, 4, 5}, {2, 3, 6, 7}),
        # nova's scheduler asks no VCPU for pinned guests: none can land.
        (None, None, None, True, set(range(8)), set()),
    ],
)
def test_the_fallback_offers_the_cpus_novas_driver_offers(
    conf, vcpu_pin_set, shared_opt, dedicated_opt, disabled, shared, dedicated
):
    conf.set_override("vcpu_pin_set", vcpu_pin_set)
    conf.set_override("cpu_shared_set", shared_opt, group="compute")
    conf.set_override("cpu_dedicated_set", dedicated_opt, group="compute")
    conf.set_override("disable_fallback_pcpu_query", disabled, group="workarounds")
    try:
        fallback = numa.pinning_fallback(conf)
        novas = _novas_fallback(vcpu_pin_set, shared_opt, dedicated_opt)
        assert fallback == (novas and not disabled)
        pinnable = shared if novas else dedicated
        topology = driver_topology(shared, pinnable)
        sets = numa.cpu_sets(conf)
        view = hostdriver.view_of("node", resources(topology, len(shared)), cpu_sets=sets)
        cells = numa_usage.host_cells(
            view.numa_cells, view.cpu_shared_set, view.cpu_dedicated_set, fallback=fallback
        )
        record = objects.NUMATopology.obj_from_db_obj(
            numa.compute_node_topology(topology._to_json(), numa_view.numa_topology(cells))
        )
        for mine, driver in zip(record.cells, topology.cells, strict=True):
            assert mine.cpuset == driver.cpuset
            assert mine.pcpuset == (driver.pcpuset if not disabled else set())
        # No PCPU inventory in the fallback: pinned guests allocate VCPU.
        assert ledger.host_totals(view)[PCPU] == len(dedicated)
    finally:
        conf.clear_override("disable_fallback_pcpu_query", group="workarounds")


def test_vcpu_pin_set_is_the_shared_set(conf):
    conf.set_override("vcpu_pin_set", "0-3")
    assert numa.cpu_sets(conf) == ({0, 1, 2, 3}, None)
    conf.clear_override("vcpu_pin_set")
    assert numa.cpu_sets(conf) == (None, None)


def test_reserved_huge_pages_are_the_agents_option(conf):
    conf.set_override(
        "reserved_huge_pages",
        [{"node": "0", "size": "2048", "count": "64"}, {"node": "1", "size": "1GB", "count": "1"}],
    )
    assert hugepages.parse(numa.reserved_huge_pages(conf)) == ((0, 2048, 64), (1, 1048576, 1))


MIXED_HOST = ({0, 4}, {1, 2, 3, 5, 6, 7})
DEDICATED_HOST = (set(), set(range(8)))
SHARED_PAIRS_HOST = ({0, 1, 4, 5}, {2, 3, 6, 7})
FLAVOR_SPECS = [
    ({"hw:cpu_policy": "dedicated"}, MIXED_HOST),
    ({"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}, MIXED_HOST),
    ({"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}, MIXED_HOST),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require"}, DEDICATED_HOST),
    ({"hw:numa_nodes": "2"}, MIXED_HOST),
    ({"hw:mem_page_size": "large"}, SHARED_PAIRS_HOST),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"}, MIXED_HOST),
]


def _flavor(specs):
    return objects.Flavor(
        vcpus=2, memory_mb=1024, root_gb=1, ephemeral_gb=0, swap=0, extra_specs=specs
    )


def _reply(fitted):
    """The RPC API's ``numa`` for the cells of nova's own fit."""
    return [
        {
            "guest_cell": index,
            "host_cell": cell.id,
            "pinning": {str(v): p for v, p in (cell.cpu_pinning or {}).items()},
            "emulator_cpus": sorted(cell.cpuset_reserved or ()),
            "pagesize_kb": cell.pagesize,
        }
        for index, cell in enumerate(fitted.cells)
    ]


@pytest.mark.parametrize("specs, cpus", FLAVOR_SPECS)
def test_instance_topology_is_what_novas_fit_returns(specs, cpus):
    host = driver_topology(*cpus)
    flavor = _flavor(specs)
    image = objects.ImageMeta.from_dict({"properties": {}})
    novas = hardware.numa_fit_instance_to_host(
        host, hardware.numa_get_constraints(flavor, image), provider_mapping=None
    )
    assert novas is not None
    mine = numa.instance_topology(flavor, image, _reply(novas))
    assert mine.emulator_threads_policy == novas.emulator_threads_policy
    fields = (
        "id",
        "cpuset",
        "pcpuset",
        "memory",
        "pagesize",
        "cpu_pinning",
        "cpuset_reserved",
        "cpu_policy",
        "cpu_thread_policy",
    )
    for a, b in zip(mine.cells, novas.cells, strict=True):
        for field in fields:
            assert getattr(a, field) == getattr(b, field), field
    # What the libvirt driver reads to pin the guest's vCPUs.
    assert mine.cpu_pinning == novas.cpu_pinning


def test_no_numa_request_is_none():
    image = objects.ImageMeta.from_dict({"properties": {}})
    assert numa.instance_topology(_flavor({}), image, None) is None


def test_image_properties_keep_glances_names():
    props = {
        "hw_cpu_policy": "dedicated",
        "hw_cpu_thread_policy": "require",
        "hw_numa_nodes": "2",
        "hw_numa_cpus.0": "0",
        "hw_numa_cpus.1": "1-3",
        "hw_numa_mem.0": "256",
        "hw_numa_mem.1": "768",
        "hw_mem_page_size": "2048",
        "hw_disk_bus": "virtio",
    }
    image = objects.ImageMeta.from_dict({"properties": props})
    assert numa.image_properties(image) == {
        "hw_cpu_policy": "dedicated",
        "hw_cpu_thread_policy": "require",
        "hw_numa_nodes": 2,
        "hw_numa_cpus.0": "0",
        "hw_numa_cpus.1": "1-3",
        "hw_numa_mem.0": 256,
        "hw_numa_mem.1": 768,
        "hw_mem_page_size": "2048",
    }
    assert numa.image_properties({"properties": {}}) is None
    traits = objects.ImageMeta.from_dict(
        {"properties": {"trait:HW_CPU_HYPERTHREADING": "required"}}
    )
    assert numa.image_properties(traits) == {"trait:HW_CPU_HYPERTHREADING": "required"}


def test_compute_node_topology_carries_the_agents_usage():
    driver = driver_topology({0, 4}, {1, 2, 3, 5, 6, 7})
    view = hostdriver.view_of("node", resources(driver, 2), cpu_sets=({0, 4}, {1, 2, 3, 5, 6, 7}))
    cells = numa_usage.host_cells(view.numa_cells, view.cpu_shared_set, view.cpu_dedicated_set)
    topology = numa_view.numa_topology(cells)
    # Two pinned CPUs and 2M pages taken on cell 1.
    topology["cells"][1]["pinned_cpus"] = [5, 7]
    topology["cells"][1]["memory_usage"] = 1024
    topology["cells"][1]["mempages"][1]["used"] = 512
    written = objects.NUMATopology.obj_from_db_obj(
        numa.compute_node_topology(driver._to_json(), topology)
    )
    cell = written.cells[1]
    assert cell.pinned_cpus == {5, 7}
    assert cell.memory_usage == 1024
    assert cell.mempages[1].used == 512
    assert cell.pcpuset == {5, 6, 7}
    # What the agent does not track comes from the driver.
    assert written.cells[0].network_metadata.physnets == {"foo"}
    assert cell.network_metadata.tunneled
    assert cell.socket == 1
    # nova's fit (the NUMATopologyFilter's) reads the usage: a 3-vCPU
    # dedicated guest on one cell fits only cell 0 now.
    flavor = objects.Flavor(vcpus=3, memory_mb=512, extra_specs={"hw:cpu_policy": "dedicated"})
    image = objects.ImageMeta.from_dict({"properties": {}})
    fitted = hardware.numa_fit_instance_to_host(
        written, hardware.numa_get_constraints(flavor, image), provider_mapping=None
    )
    assert [c.id for c in fitted.cells] == [0]
    assert numa.compute_node_topology(None, None) is None


@pytest.mark.parametrize("specs, cpus", FLAVOR_SPECS)
def test_pinned_cpus_are_the_pinning_of_novas_own_fit(specs, cpus):
    # A guest nova-compute placed, claimed by the agent after the fact
    # (adoption), keeps the CPUs of its instance's numa_topology: pinned
    # ones and the emulator threads' (shared-only guests pin none).
    host = driver_topology(*cpus)
    image = objects.ImageMeta.from_dict({"properties": {}})
    fitted = hardware.numa_fit_instance_to_host(
        host, hardware.numa_get_constraints(_flavor(specs), image), provider_mapping=None
    )
    expected = set(fitted.cpu_pinning) | set().union(
        *(cell.cpuset_reserved or () for cell in fitted.cells)
    )
    assert numa.pinned_cpus(fitted) == expected
    assert numa.pinned_cpus(None) == set()
