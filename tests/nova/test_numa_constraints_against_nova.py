"""rtagent's reading of NUMA extra specs and image properties beside
nova 34.0.0's (``nova.virt.hardware.numa_get_constraints``) on random
flavors and images: the same cells (vCPUs, dedicated vCPUs, memory, page
size), policies, and the same verdict (both refuse, or neither).

Real-time masks and the cases rtagent refuses on purpose where nova does
not (docs of :mod:`rtagent.numa.constraints`) are not generated. Run by
``make test-nova`` in .venv-nova.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nova import exception, objects
from nova.virt import hardware

from rtagent.numa import model
from rtagent.numa.constraints import guest_topology
from rtagent.numa.errors import InvalidConstraint

objects.register_all()


# key: (valid values, invalid values, how many times more often absent).
FLAVOR_KEYS = {
    "hw:cpu_policy": (("shared", "dedicated", "dedicated", "mixed"), ("bogus",), 2),
    "hw:cpu_thread_policy": (("prefer", "isolate", "require"), ("bogus",), 6),
    "hw:mem_page_size": (("small", "large", "any", "2048", "2MB", "1GB"), ("huge",), 4),
    "hw:cpu_dedicated_mask": (("0", "^0", "0-1", "1-3", "^1-2"), ("9", "x"), 4),
    "hw:numa_nodes": (("1", "2", "2", "4"), ("0", "two"), 3),
    "hw:emulator_threads_policy": (("share", "isolate"), ("bad",), 6),
    "resources:PCPU": (("1", "2", "4", "5"), (), 12),
    "resources1:VCPU": (("2",), (), 12),
    "trait:HW_CPU_HYPERTHREADING": (("required", "forbidden"), (), 12),
}
IMAGE_KEYS = {
    "hw_cpu_policy": (("shared", "dedicated", "mixed"), ("bogus",), 8),
    "hw_cpu_thread_policy": (("prefer", "isolate", "require"), (), 8),
    "hw_mem_page_size": (("small", "large", "2048", "1GB"), (), 8),
    "hw_numa_nodes": (("1", "2"), (), 8),
    "trait:HW_CPU_HYPERTHREADING": (("required",), (), 12),
}
cpu_specs = st.sampled_from(("0", "1", "0-1", "2-3", "1,3", "0,2", "4-7", "0-3", "1-2"))


@st.composite
def wild(draw, vcpus, memory):
    """Any keys, valid and invalid values mixed: mostly refusals."""
    specs, props = {}, {}
    for target, keys in ((specs, FLAVOR_KEYS), (props, IMAGE_KEYS)):
        for key, (valid, invalid, absent) in keys.items():
            values = valid + invalid
            value = draw(st.sampled_from((None,) * absent * len(values) + values))
            if value is not None:
                target[key] = value
    count = draw(st.sampled_from((0, 1, 2, 3)))
    target, prefix = draw(st.sampled_from(((specs, "hw:numa_"), (props, "hw_numa_"))))
    for index in range(count):
        if draw(st.integers(0, 5)) or index == 0:
            target[f"{prefix}cpus.{index}"] = draw(cpu_specs)
        if draw(st.integers(0, 5)) or index == 0:
            target[f"{prefix}mem.{index}"] = str(draw(st.sampled_from((256, 512, 1024))))
    return specs, props


@st.composite
def coherent(draw, vcpus, memory):
    """Keys that go together: mostly a topology to compare."""
    specs, props = {}, {}
    policy = draw(st.sampled_from((None, "shared", "dedicated", "mixed", "resources")))
    if policy == "mixed" and vcpus == 1:
        policy = "dedicated"
    pinned = policy in ("dedicated", "mixed", "resources")
    if policy == "resources":
        isolate = draw(st.booleans())
        specs["resources:PCPU"] = str(vcpus + 1 if isolate else vcpus)
        if isolate:
            specs["hw:emulator_threads_policy"] = "isolate"
    elif policy is not None:
        where = draw(st.sampled_from(("flavor", "flavor", "image")))
        if where == "image" and policy != "mixed":
            props["hw_cpu_policy"] = policy
        else:
            specs["hw:cpu_policy"] = policy
    if policy == "mixed":
        specs["hw:cpu_dedicated_mask"] = draw(st.sampled_from(("0", "^0", f"{vcpus - 1}")))
    if pinned and draw(st.booleans()):
        for where in draw(
            st.sampled_from(
                (
                    ("hw:cpu_thread_policy",),
                    ("hw_cpu_thread_policy",),
                    ("hw:cpu_thread_policy", "hw_cpu_thread_policy"),
                )
            )
        ):
            (specs if where.startswith("hw:") else props)[where] = draw(
                st.sampled_from(model.THREAD_POLICIES)
            )
    if policy in ("shared", "dedicated", "mixed") and draw(st.integers(0, 3)) == 0:
        # Both sides: nova's precedence and conflicts.
        specs["hw:cpu_policy"] = policy
        props["hw_cpu_policy"] = draw(st.sampled_from(("shared", "dedicated", "mixed")))
    if pinned and "hw:emulator_threads_policy" not in specs and draw(st.booleans()):
        specs["hw:emulator_threads_policy"] = draw(st.sampled_from(("share", "isolate")))
    if draw(st.booleans()):
        specs["hw:mem_page_size"] = draw(st.sampled_from(("small", "large", "any", "2MB")))
        if specs["hw:mem_page_size"] in ("large", "any") and draw(st.booleans()):
            props["hw_mem_page_size"] = draw(st.sampled_from(("2048", "1GB", "small")))
    nodes = draw(st.sampled_from([n for n in (None, 1, 2, 4) if n is None or vcpus % n == 0]))
    if nodes:
        target, prefix = draw(st.sampled_from(((specs, "hw:"), (props, "hw_"))))
        target[f"{prefix}numa_nodes"] = str(nodes)
        if draw(st.booleans()):
            per = vcpus // nodes
            for index in range(nodes):
                cpus = range(index * per, (index + 1) * per)
                target[f"{prefix}numa_cpus.{index}"] = ",".join(map(str, cpus))
            split = [memory // nodes] * nodes
            if nodes > 1 and draw(st.booleans()):
                split[0], split[1] = split[0] + 128, split[1] - 128  # asymmetric
            for index, mem in enumerate(split):
                target[f"{prefix}numa_mem.{index}"] = str(mem)
    return specs, props


@st.composite
def requests(draw):
    vcpus = draw(st.sampled_from((1, 2, 4)))
    memory = draw(st.sampled_from((512, 1024, 2048, 515)))
    kind = coherent if draw(st.integers(0, 3)) else wild
    specs, props = draw(kind(vcpus, memory))
    return vcpus, memory, specs, props


def nova_topology(vcpus, memory, specs, props):
    flavor = objects.Flavor(vcpus=vcpus, memory_mb=memory, extra_specs=specs)
    image = objects.ImageMeta.from_dict({"properties": props})
    return hardware.numa_get_constraints(flavor, image)


def as_cells(topology):
    return [
        (
            sorted(c.cpuset),
            sorted(c.pcpuset),
            c.memory,
            c.pagesize if "pagesize" in c else None,
        )
        for c in topology.cells
    ]


PAGE_NAMES = {-1: model.PAGES_SMALL, -2: model.PAGES_LARGE, -3: model.PAGES_ANY}


@settings(
    max_examples=3000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(requests())
def test_the_same_topology_or_the_same_refusal_as_nova(request):
    vcpus, memory, specs, props = request
    try:
        theirs = nova_topology(vcpus, memory, specs, props)
    except (exception.Invalid, exception.NovaException, ValueError) as exc:
        theirs = exc
    try:
        ours = guest_topology(vcpus, memory, specs, props)
    except InvalidConstraint as exc:
        ours = exc
    if isinstance(theirs, Exception) or isinstance(ours, Exception):
        assert isinstance(theirs, Exception) and isinstance(ours, Exception), (theirs, ours)
        return
    if theirs is None:
        assert ours is None
        return
    assert ours is not None
    expected = [
        (cpus, pcpus, mem, PAGE_NAMES.get(size, size))
        for cpus, pcpus, mem, size in as_cells(theirs)
    ]
    got = [(sorted(c.cpuset), sorted(c.pcpuset), c.memory_mb, c.pagesize) for c in ours.cells]
    assert got == expected
    assert ours.cpu_policy == theirs.cells[0].cpu_policy
    assert ours.thread_policy == theirs.cells[0].cpu_thread_policy
    assert ours.emulator_threads == theirs.emulator_threads_policy
