"""Every extra spec and image property the NUMA constraints read, valid and
invalid (tests/nova compares the same reading with nova's at random)."""

import pytest

from rtagent.numa import model
from rtagent.numa.constraints import guest_topology
from rtagent.numa.errors import InvalidConstraint


def cells(topology):
    return [
        (sorted(c.cpuset), sorted(c.pcpuset), c.memory_mb, c.pagesize, c.thread_policy)
        for c in topology.cells
    ]


VALID = [
    # (vcpus, memory, extra specs, image properties) -> cells
    ("no request", 2, 1024, {}, {}, None),
    ("shared policy alone", 2, 1024, {"hw:cpu_policy": "shared"}, {}, None),
    (
        "dedicated",
        2,
        1024,
        {"hw:cpu_policy": "dedicated"},
        {},
        [([], [0, 1], 1024, None, "prefer")],
    ),
    (
        "dedicated from the image",
        2,
        1024,
        {},
        {"hw_cpu_policy": "dedicated"},
        [([], [0, 1], 1024, None, "prefer")],
    ),
    (
        "mixed with a mask",
        4,
        1024,
        {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "2-3"},
        {},
        [([0, 1], [2, 3], 1024, None, "prefer")],
    ),
    (
        "mixed with an excluding mask",
        4,
        1024,
        {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "^0"},
        {},
        [([0], [1, 2, 3], 1024, None, "prefer")],
    ),
    (
        "thread policy",
        2,
        1024,
        {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
        {},
        [([], [0, 1], 1024, None, "isolate")],
    ),
    (
        "image thread policy under the flavor's prefer",
        2,
        1024,
        {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "prefer"},
        {"hw_cpu_thread_policy": "require"},
        [([], [0, 1], 1024, None, "prefer")],
    ),
    (
        "hyperthreading trait forbidden",
        2,
        1024,
        {"hw:cpu_policy": "dedicated", "trait:HW_CPU_HYPERTHREADING": "forbidden"},
        {},
        [([], [0, 1], 1024, None, "isolate")],
    ),
    (
        "hyperthreading trait required by the image",
        2,
        1024,
        {"hw:cpu_policy": "dedicated"},
        {"trait:HW_CPU_HYPERTHREADING": "required"},
        [([], [0, 1], 1024, None, "require")],
    ),
    ("resources:PCPU", 2, 1024, {"resources:PCPU": "2"}, {}, [([], [0, 1], 1024, None, "prefer")]),
    ("resources:VCPU", 2, 1024, {"resources1:VCPU": "2"}, {}, None),
    (
        "PCPU with isolated emulator threads",
        2,
        1024,
        {"resources:PCPU": "3", "hw:emulator_threads_policy": "isolate"},
        {},
        [([], [0, 1], 1024, None, "prefer")],
    ),
    (
        "two nodes, split evenly",
        4,
        2048,
        {"hw:numa_nodes": "2"},
        {},
        [([0, 1], [], 1024, None, "prefer"), ([2, 3], [], 1024, None, "prefer")],
    ),
    (
        "nodes from the image",
        2,
        1024,
        {},
        {"hw_numa_nodes": "2"},
        [([0], [], 512, None, "prefer"), ([1], [], 512, None, "prefer")],
    ),
    (
        "asymmetric nodes",
        4,
        2048,
        {
            "hw:numa_nodes": "2",
            "hw:numa_cpus.0": "0",
            "hw:numa_cpus.1": "1-3",
            "hw:numa_mem.0": "512",
            "hw:numa_mem.1": "1536",
        },
        {},
        [([0], [], 512, None, "prefer"), ([1, 2, 3], [], 1536, None, "prefer")],
    ),
    (
        "node mapping from the image",
        2,
        1024,
        {},
        {
            "hw_numa_nodes": "2",
            "hw_numa_cpus.0": "1",
            "hw_numa_cpus.1": "0",
            "hw_numa_mem.0": "256",
            "hw_numa_mem.1": "768",
        },
        [([1], [], 256, None, "prefer"), ([0], [], 768, None, "prefer")],
    ),
    (
        "small pages",
        1,
        1024,
        {"hw:mem_page_size": "small"},
        {},
        [([0], [], 1024, "small", "prefer")],
    ),
    ("a size in KiB", 1, 1024, {"hw:mem_page_size": "2048"}, {}, [([0], [], 1024, 2048, "prefer")]),
    (
        "a size with a unit",
        1,
        1024,
        {"hw:mem_page_size": "1GB"},
        {},
        [([0], [], 1024, 1048576, "prefer")],
    ),
    (
        "the image picks within the flavor's large",
        1,
        1024,
        {"hw:mem_page_size": "large"},
        {"hw_mem_page_size": "2MB"},
        [([0], [], 1024, 2048, "prefer")],
    ),
]


@pytest.mark.parametrize(
    ("vcpus", "memory", "specs", "props", "expected"),
    [case[1:] for case in VALID],
    ids=[case[0] for case in VALID],
)
def test_valid(vcpus, memory, specs, props, expected):
    topology = guest_topology(vcpus, memory, specs, props)
    assert (cells(topology) if topology else None) == expected


def test_policies_and_emulator_threads_are_carried():
    topology = guest_topology(
        2, 1024, {"hw:cpu_policy": "dedicated", "hw:emulator_threads_policy": "isolate"}, {}
    )
    assert topology.cpu_policy == "dedicated"
    assert topology.thread_policy is None
    assert topology.emulator_isolate
    assert topology.cells[0].thread_policy == model.PREFER


INVALID = [
    # (vcpus, memory, extra specs, image properties) -> the key named
    ("hw:cpu_policy", 2, 1024, {"hw:cpu_policy": "pinned"}, {}),
    ("hw_cpu_policy", 2, 1024, {}, {"hw_cpu_policy": "pinned"}),
    ("hw_cpu_policy", 2, 1024, {"hw:cpu_policy": "shared"}, {"hw_cpu_policy": "dedicated"}),
    ("hw_cpu_policy", 2, 1024, {"hw:cpu_policy": "mixed"}, {"hw_cpu_policy": "dedicated"}),
    ("hw:cpu_thread_policy", 2, 1024, {"hw:cpu_thread_policy": "always"}, {}),
    ("hw_cpu_thread_policy", 2, 1024, {}, {"hw_cpu_thread_policy": "always"}),
    (
        "hw_cpu_thread_policy",
        2,
        1024,
        {"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "isolate"},
        {"hw_cpu_thread_policy": "require"},
    ),
    ("hw:cpu_thread_policy", 2, 1024, {"hw:cpu_thread_policy": "isolate"}, {}),
    ("hw:emulator_threads_policy", 2, 1024, {"hw:emulator_threads_policy": "pin"}, {}),
    ("hw:emulator_threads_policy", 2, 1024, {"hw:emulator_threads_policy": "isolate"}, {}),
    (
        "hw:cpu_dedicated_mask",
        2,
        1024,
        {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0-1"},
        {},
    ),
    (
        "hw:cpu_dedicated_mask",
        2,
        1024,
        {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "5"},
        {},
    ),
    (
        "hw:cpu_dedicated_mask",
        2,
        1024,
        {"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "a"},
        {},
    ),
    (
        "hw:cpu_dedicated_mask",
        2,
        1024,
        {"hw:cpu_policy": "dedicated", "hw:cpu_dedicated_mask": "0"},
        {},
    ),
    ("hw:cpu_dedicated_mask", 2, 1024, {"hw:cpu_dedicated_mask": "0"}, {}),
    ("hw:cpu_policy", 2, 1024, {"hw:cpu_policy": "mixed"}, {}),
    ("resources:PCPU", 2, 1024, {"hw:cpu_policy": "dedicated", "resources:PCPU": "2"}, {}),
    ("resources:PCPU", 2, 1024, {"resources:PCPU": "2", "resources:VCPU": "2"}, {}),
    ("resources:PCPU", 2, 1024, {"resources:PCPU": "3"}, {}),
    (
        "resources:PCPU",
        2,
        1024,
        {"resources:PCPU": "2", "hw:emulator_threads_policy": "isolate"},
        {},
    ),
    ("resources:PCPU", 2, 1024, {"resources:PCPU": "two"}, {}),
    (
        "trait:HW_CPU_HYPERTHREADING",
        2,
        1024,
        {
            "hw:cpu_policy": "dedicated",
            "hw:cpu_thread_policy": "prefer",
            "trait:HW_CPU_HYPERTHREADING": "required",
        },
        {},
    ),
    ("hw:numa_nodes", 2, 1024, {"hw:numa_nodes": "0"}, {}),
    ("hw:numa_nodes", 2, 1024, {"hw:numa_nodes": "two"}, {}),
    ("hw_numa_nodes", 2, 1024, {"hw:numa_nodes": "2"}, {"hw_numa_nodes": "2"}),
    ("hw:numa_nodes", 3, 1024, {"hw:numa_nodes": "2"}, {}),
    (
        "hw:numa_mem.N",
        2,
        1024,
        {"hw:numa_nodes": "2", "hw:numa_cpus.0": "0", "hw:numa_cpus.1": "1"},
        {},
    ),
    (
        "hw:numa_cpus.1",
        2,
        1024,
        {
            "hw:numa_nodes": "2",
            "hw:numa_cpus.0": "0",
            "hw:numa_cpus.1": "0-1",
            "hw:numa_mem.0": "512",
            "hw:numa_mem.1": "512",
        },
        {},
    ),
    (
        "hw:numa_cpus.0",
        2,
        1024,
        {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-2", "hw:numa_mem.0": "1024"},
        {},
    ),
    (
        "hw:numa_cpus.N",
        2,
        1024,
        {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0", "hw:numa_mem.0": "1024"},
        {},
    ),
    (
        "hw:numa_mem.N",
        2,
        1024,
        {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-1", "hw:numa_mem.0": "1000"},
        {},
    ),
    (
        "hw:numa_mem.0",
        1,
        1024,
        {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0", "hw:numa_mem.0": "lots"},
        {},
    ),
    (
        "hw:numa_cpus.0",
        1,
        1024,
        {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-", "hw:numa_mem.0": "1024"},
        {},
    ),
    (
        "hw_numa_cpus.0",
        1,
        1024,
        {"hw:numa_nodes": "1", "hw:numa_cpus.0": "0", "hw:numa_mem.0": "1024"},
        {"hw_numa_cpus.0": "0"},
    ),
    ("hw:mem_page_size", 1, 1024, {"hw:mem_page_size": "huge"}, {}),
    ("hw:mem_page_size", 1, 1024, {"hw:mem_page_size": "1Gb"}, {}),
    ("hw:mem_page_size", 1, 1024, {"hw:mem_page_size": "0"}, {}),
    ("hw_mem_page_size", 1, 1024, {}, {"hw_mem_page_size": "large"}),
    ("hw_mem_page_size", 1, 1024, {"hw:mem_page_size": "small"}, {"hw_mem_page_size": "2048"}),
]


@pytest.mark.parametrize(("key", "vcpus", "memory", "specs", "props"), INVALID)
def test_invalid_names_the_key(key, vcpus, memory, specs, props):
    with pytest.raises(InvalidConstraint) as caught:
        guest_topology(vcpus, memory, specs, props)
    assert caught.value.key == key
    assert caught.value.code == "numa.invalid_constraint"
    assert str(caught.value).startswith(f"{key}: ")
