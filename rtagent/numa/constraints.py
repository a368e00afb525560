"""A guest's NUMA topology from its flavor and image, with nova's meaning.

The flavor's extra specs (``hw:cpu_policy``, ``hw:cpu_thread_policy``,
``hw:cpu_dedicated_mask``, ``hw:emulator_threads_policy``,
``hw:numa_nodes``, ``hw:numa_cpus.N``, ``hw:numa_mem.N``,
``hw:mem_page_size``, ``resources[N]:VCPU|PCPU``,
``trait[N]:HW_CPU_HYPERTHREADING``) and the image's properties as Glance
stores them (``hw_cpu_policy``, ``hw_cpu_thread_policy``, ``hw_numa_nodes``,
``hw_numa_cpus.N``, ``hw_numa_mem.N``, ``hw_mem_page_size``,
``trait:HW_CPU_HYPERTHREADING``), with nova's precedence and conflict rules
(``nova.virt.hardware.numa_get_constraints``). Every invalid or
conflicting value is refused with :class:`~rtagent.numa.errors.InvalidConstraint`
naming the key. Real-time masks (``hw:cpu_realtime*``) are not read: a
``mixed`` guest names its dedicated vCPUs with ``hw:cpu_dedicated_mask``.

Stricter than nova, on purpose: a page size with a bit unit (``1Gb``) or
of zero, and a ``resources:VCPU|PCPU`` count that is not an integer, are
refused (nova accepts them and then never fits, or ignores them).
"""

import dataclasses
import re

from rtagent import cpuspec
from rtagent.numa import model
from rtagent.numa.errors import InvalidConstraint

SHARED, DEDICATED, MIXED = "shared", "dedicated", "mixed"
CPU_POLICIES = (SHARED, DEDICATED, MIXED)
EMULATOR_POLICIES = ("share", "isolate")
# nova's ImageMetaProps.NUMA_NODES_MAX: hw:numa_cpus.N / numa_mem.N read up to it.
NUMA_NODES_MAX = 128

_RESOURCE = re.compile(r"^resources([1-9][0-9]*)?:(VCPU|PCPU)$")
_HT_TRAIT = re.compile(r"^trait([1-9][0-9]*)?:HW_CPU_HYPERTHREADING$")
_PAGE_UNITS = {"KB": 1, "KiB": 1, "MB": 1024, "MiB": 1024, "GB": 1024**2, "GiB": 1024**2}
_PAGE_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(KB|KiB|MB|MiB|GB|GiB)$")


@dataclasses.dataclass(frozen=True)
class GuestTopology:
    """The guest's NUMA cells (:class:`~rtagent.numa.model.GuestCell`), in
    order, and the policies that apply to all of them.

    :param thread_policy: as requested (None: not set; the cells carry
        ``prefer`` then).
    :param emulator_threads: ``share``, ``isolate`` or None.
    """

    cells: tuple
    cpu_policy: str | None
    thread_policy: str | None = None
    emulator_threads: str | None = None

    @property
    def emulator_isolate(self):
        return self.emulator_threads == "isolate"


def guest_topology(vcpus, memory_mb, extra_specs=None, image_properties=None):
    """The NUMA topology a guest asks for, or None when it asks for none
    (no NUMA node count, page size, or dedicated CPUs).

    :raises InvalidConstraint: a value is invalid or conflicts.
    """
    specs = dict(extra_specs or {})
    props = dict(image_properties or {})
    cpu_policy = _cpu_policy(specs.get("hw:cpu_policy"), props.get("hw_cpu_policy"))
    thread_policy = _thread_policy(
        specs.get("hw:cpu_thread_policy"), props.get("hw_cpu_thread_policy")
    )
    dedicated = _dedicated_mask(specs.get("hw:cpu_dedicated_mask"), vcpus)
    emulator = specs.get("hw:emulator_threads_policy") or None
    if emulator is not None and emulator not in EMULATOR_POLICIES:
        raise InvalidConstraint("hw:emulator_threads_policy", _one_of(emulator, EMULATOR_POLICIES))
    cpu_policy = _resources_policy(specs, cpu_policy, emulator, vcpus)
    thread_policy = _hyperthreading_trait(specs, props, thread_policy)
    _check_policies(cpu_policy, thread_policy, emulator, dedicated)

    nodes = _node_count(specs.get("hw:numa_nodes"), props.get("hw_numa_nodes"))
    pagesize = _page_size(specs.get("hw:mem_page_size"), props.get("hw_mem_page_size"))
    if not (nodes or pagesize or cpu_policy in (DEDICATED, MIXED)):
        return None
    pcpus = frozenset(range(vcpus)) if cpu_policy == DEDICATED else (dedicated or frozenset())
    layout = _layout(specs, props, nodes or 1, vcpus, memory_mb)
    cells = tuple(
        model.GuestCell(
            id=index,
            memory_mb=memory,
            cpuset=frozenset(cpus - pcpus),
            pcpuset=frozenset(cpus & pcpus),
            pagesize=pagesize,
            thread_policy=thread_policy or model.PREFER,
        )
        for index, (cpus, memory) in enumerate(layout)
    )
    return GuestTopology(cells, cpu_policy, thread_policy, emulator)


def _one_of(value, allowed):
    return f"{value!r} is not one of {', '.join(allowed)}"


# -- CPU policies ---------------------------------------------------------


def _cpu_policy(flavor, image):
    if flavor and flavor not in CPU_POLICIES:
        raise InvalidConstraint("hw:cpu_policy", _one_of(flavor, CPU_POLICIES))
    if image and image not in CPU_POLICIES:
        raise InvalidConstraint("hw_cpu_policy", _one_of(image, CPU_POLICIES))
    if flavor == DEDICATED:
        return flavor
    if flavor == MIXED:
        if image == DEDICATED:
            raise InvalidConstraint("hw_cpu_policy", "dedicated conflicts with the flavor's mixed")
        return flavor
    if flavor == SHARED:
        if image in (MIXED, DEDICATED):
            raise InvalidConstraint("hw_cpu_policy", f"{image} conflicts with the flavor's shared")
        return flavor
    return image or None


def _thread_policy(flavor, image):
    if flavor and flavor not in model.THREAD_POLICIES:
        raise InvalidConstraint("hw:cpu_thread_policy", _one_of(flavor, model.THREAD_POLICIES))
    if image and image not in model.THREAD_POLICIES:
        raise InvalidConstraint("hw_cpu_thread_policy", _one_of(image, model.THREAD_POLICIES))
    if flavor in (None, "", model.PREFER):
        return flavor or image or None
    if image and image != flavor:
        raise InvalidConstraint(
            "hw_cpu_thread_policy", f"{image} conflicts with the flavor's {flavor}"
        )
    return flavor


def _dedicated_mask(mask, vcpus):
    """hw:cpu_dedicated_mask: the dedicated vCPUs of a mixed guest; a mask
    starting with ``^`` excludes from all vCPUs."""
    if not mask:
        return None
    spec = f"0-{vcpus - 1},{mask}" if mask.strip().startswith("^") else mask
    try:
        pcpus = cpuspec.parse(spec)
    except ValueError as exc:
        raise InvalidConstraint("hw:cpu_dedicated_mask", str(exc)) from None
    every = frozenset(range(vcpus))
    if not pcpus or not every - pcpus:
        raise InvalidConstraint(
            "hw:cpu_dedicated_mask", "must leave both dedicated and shared vCPUs"
        )
    if not pcpus <= every:
        raise InvalidConstraint("hw:cpu_dedicated_mask", f"names vCPUs beyond the flavor's {vcpus}")
    return pcpus


def _resources_policy(specs, cpu_policy, emulator, vcpus):
    """The policy ``resources[N]:VCPU|PCPU`` imply (nova's way of asking
    for pinning without hw:cpu_policy)."""
    wanted = {"VCPU": 0, "PCPU": 0}
    keys = {}
    for key, value in specs.items():
        found = _RESOURCE.match(key)
        if not found:
            continue
        try:
            wanted[found.group(2)] += int(value)
        except (TypeError, ValueError):
            raise InvalidConstraint(key, f"{value!r} is not an integer") from None
        keys.setdefault(found.group(2), key)
    if cpu_policy and (wanted["VCPU"] or wanted["PCPU"]):
        key = keys.get("PCPU") or keys["VCPU"]
        raise InvalidConstraint(key, "cannot be combined with hw:cpu_policy / hw_cpu_policy")
    if wanted["VCPU"] and wanted["PCPU"]:
        raise InvalidConstraint(keys["PCPU"], "cannot be combined with resources:VCPU")
    if wanted["PCPU"]:
        need = vcpus + 1 if emulator == "isolate" else vcpus
        if wanted["PCPU"] != need:
            why = " (the vCPUs and the emulator threads')" if emulator == "isolate" else ""
            raise InvalidConstraint(keys["PCPU"], f"must be {need}{why}, not {wanted['PCPU']}")
        return DEDICATED
    if wanted["VCPU"]:
        return SHARED
    return cpu_policy


def _hyperthreading_trait(specs, props, thread_policy):
    value = next((v for k, v in specs.items() if _HT_TRAIT.match(k)), None)
    key = next((k for k in specs if _HT_TRAIT.match(k)), None)
    if value is None and props.get("trait:HW_CPU_HYPERTHREADING") == "required":
        value, key = "required", "trait:HW_CPU_HYPERTHREADING"
    if value is None:
        return thread_policy
    if thread_policy:
        raise InvalidConstraint(key, "cannot be combined with hw:cpu_thread_policy")
    if value == "forbidden":
        return model.ISOLATE
    if value == "required":
        return model.REQUIRE
    return thread_policy


def _check_policies(cpu_policy, thread_policy, emulator, dedicated):
    if cpu_policy in (SHARED, None):
        if thread_policy:
            raise InvalidConstraint("hw:cpu_thread_policy", "needs dedicated or mixed vCPUs")
        if emulator == "isolate":
            raise InvalidConstraint("hw:emulator_threads_policy", "needs dedicated or mixed vCPUs")
        if dedicated:
            raise InvalidConstraint("hw:cpu_dedicated_mask", "needs hw:cpu_policy=mixed")
    elif cpu_policy == DEDICATED:
        if dedicated:
            raise InvalidConstraint("hw:cpu_dedicated_mask", "needs hw:cpu_policy=mixed")
    elif not dedicated:
        raise InvalidConstraint("hw:cpu_policy", "mixed needs hw:cpu_dedicated_mask")


# -- nodes, pages, layout -----------------------------------------------------


def _node_count(flavor, image):
    if flavor and image:
        raise InvalidConstraint("hw_numa_nodes", "the flavor sets hw:numa_nodes")
    nodes = flavor or image
    if nodes is None or nodes == "":
        return None
    key = "hw:numa_nodes" if flavor else "hw_numa_nodes"
    try:
        count = int(str(nodes).strip())
    except ValueError:
        raise InvalidConstraint(key, f"{nodes!r} is not an integer") from None
    if count < 1:
        raise InvalidConstraint(key, f"{count} is less than 1")
    return count


def _page_size(flavor, image):
    if not flavor:
        if image:
            raise InvalidConstraint("hw_mem_page_size", "the flavor does not allow page sizes")
        return None
    size = _page_value("hw:mem_page_size", flavor)
    if image and size in (model.PAGES_ANY, model.PAGES_LARGE):
        return _page_value("hw_mem_page_size", image)
    if image:
        raise InvalidConstraint("hw_mem_page_size", f"the flavor asks for {flavor}")
    return size


def _page_value(key, value):
    text = str(value).strip()
    if text in (model.PAGES_SMALL, model.PAGES_LARGE, model.PAGES_ANY):
        return text
    if text.isdigit():
        kib = int(text)
    else:
        found = _PAGE_SIZE.match(text)
        if not found:
            raise InvalidConstraint(key, f"{value!r} is not small, large, any or a size")
        amount = float(found.group(1)) * _PAGE_UNITS[found.group(2)]
        if amount != int(amount):
            raise InvalidConstraint(key, f"{value!r} is not a whole number of KiB")
        kib = int(amount)
    if kib <= 0:
        raise InvalidConstraint(key, f"{value!r} is not a page size")
    return kib


def _mapping(specs, props, name, parse):
    """hw:numa_<name>.N (flavor) or hw_numa_<name>.N (image), 0, 1, ...
    while present: ``(key prefix, [values])`` or None."""
    for prefix, source in ((f"hw:numa_{name}", specs), (f"hw_numa_{name}", props)):
        values = []
        for index in range(NUMA_NODES_MAX):
            key = f"{prefix}.{index}"
            if key not in source:
                break
            values.append(parse(key, source[key]))
        if values:
            if source is specs and f"hw_numa_{name}.0" in props:
                raise InvalidConstraint(f"hw_numa_{name}.0", f"the flavor sets {prefix}.N")
            return prefix, values
    return None


def _cpus(key, value):
    try:
        return cpuspec.parse(str(value))
    except ValueError as exc:
        raise InvalidConstraint(key, str(exc)) from None


def _memory(key, value):
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidConstraint(key, f"{value!r} is not an integer (MiB)") from None


def _layout(specs, props, nodes, vcpus, memory_mb):
    """``[(vCPUs, memory MiB)]`` per guest cell."""
    cpu_map = _mapping(specs, props, "cpus", _cpus)
    mem_map = _mapping(specs, props, "mem", _memory)
    if cpu_map is None and mem_map is None:
        if vcpus % nodes or memory_mb % nodes:
            raise InvalidConstraint(
                "hw:numa_nodes", f"{nodes} does not divide {vcpus} vCPUs and {memory_mb} MiB"
            )
        per_cpu, per_mem = vcpus // nodes, memory_mb // nodes
        return [(frozenset(range(n * per_cpu, (n + 1) * per_cpu)), per_mem) for n in range(nodes)]
    for mapping, name in ((cpu_map, "cpus"), (mem_map, "mem")):
        if mapping is None or len(mapping[1]) != nodes:
            prefix = mapping[0] if mapping else f"hw:numa_{name}"
            raise InvalidConstraint(f"{prefix}.N", f"must be given for each of the {nodes} node(s)")
    cpu_prefix, cpu_list = cpu_map
    mem_prefix, mem_list = mem_map
    left = set(range(vcpus))
    for index, cpus in enumerate(cpu_list):
        for cpu in sorted(cpus):
            if cpu >= vcpus:
                raise InvalidConstraint(
                    f"{cpu_prefix}.{index}", f"vCPU {cpu} is beyond the flavor's {vcpus}"
                )
            if cpu not in left:
                raise InvalidConstraint(f"{cpu_prefix}.{index}", f"vCPU {cpu} is in two nodes")
            left.remove(cpu)
    if left:
        raise InvalidConstraint(f"{cpu_prefix}.N", f"vCPUs {sorted(left)} are in no node")
    if sum(mem_list) != memory_mb:
        raise InvalidConstraint(
            f"{mem_prefix}.N", f"adds up to {sum(mem_list)} MiB, not the flavor's {memory_mb}"
        )
    return list(zip(cpu_list, mem_list, strict=True))
