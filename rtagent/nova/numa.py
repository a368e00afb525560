# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""NUMA between nova's objects and the agent's values (pure: reads objects
and configuration, calls nothing).

- The host: nova's virt driver reports its cells as a ``NUMATopology``
  (``get_available_resource()['numa_topology']``); the agent wants
  :class:`~rtagent.virt.host.NumaCell` values and the CPU sets of nova.conf
  (:func:`host_cells`, :func:`cpu_sets`, :func:`reserved_huge_pages`,
  :func:`pinning_fallback`).
- A claim: the agent answers with the host cell and pinning of each guest
  cell (the RPC API's ``numa``); nova's ComputeManager and virt driver read
  them as the instance's ``InstanceNUMATopology`` (:func:`instance_topology`).
- The node: the compute-node view's ``numa_topology`` becomes
  ``ComputeNode.numa_topology``, what nova's NUMATopologyFilter reads
  (:func:`compute_node_topology`).
"""

from nova import objects
from nova.virt import hardware

from rtagent.virt.host import NumaCell, NumaCpu

# The image properties the agent reads (rtagent.numa.constraints), as
# Glance names them; nova's ImageMetaProps holds the lists as one field.
_IMAGE_SCALARS = ("hw_cpu_policy", "hw_cpu_thread_policy", "hw_numa_nodes", "hw_mem_page_size")
_HYPERTHREADING = "HW_CPU_HYPERTHREADING"


def host_cells(numa_topology):
    """The :class:`NumaCell` values of a virt driver's ``numa_topology``
    (a ``NUMATopology``, its JSON string as ``get_available_resource``
    returns it, or None): ``()`` for a host without cells.

    A cell's CPUs are its shared and dedicated ones (nova's driver leaves
    out CPUs in neither set); a CPU's siblings are its thread siblings
    among them (itself alone when the driver reports none). Cores are
    numbered within the cell in the order of their lowest CPU.
    """
    if not numa_topology:
        return ()
    if isinstance(numa_topology, str):
        numa_topology = objects.NUMATopology.obj_from_db_obj(numa_topology)
    cells = []
    for cell in numa_topology.cells:
        cpus = set(cell.cpuset) | set(cell.pcpuset)
        cores = sorted((frozenset(s) & cpus for s in cell.siblings or ()), key=min)
        cores = [c for c in cores if c]
        covered = set().union(*cores) if cores else set()
        cores += [frozenset({cpu}) for cpu in sorted(cpus - covered)]
        cores.sort(key=min)
        known = cell.socket if cell.obj_attr_is_set("socket") else None
        socket = known if known is not None else 0
        numa_cpus = sorted(
            (
                NumaCpu(id=cpu, socket_id=socket, core_id=index, siblings=core)
                for index, core in enumerate(cores)
                for cpu in core
            ),
            key=lambda c: c.id,
        )
        pages = tuple(sorted((int(p.size_kb), int(p.total)) for p in cell.mempages or ()))
        cells.append(
            NumaCell(
                id=int(cell.id),
                memory_mb=int(cell.memory),
                cpus=tuple(numa_cpus),
                pages=pages,
                socket_id=known,
            )
        )
    return tuple(sorted(cells, key=lambda c: c.id))


def cpu_sets(conf):
    """``(cpu_shared_set, cpu_dedicated_set)`` of nova.conf as the agent's
    host view carries them (frozensets, or None when unset).

    The shared set is nova's ``vcpu_pin_set`` when that legacy option is
    set (nova's libvirt driver counts VCPU from it first), else
    ``[compute] cpu_shared_set``.
    """
    shared_spec = conf.vcpu_pin_set or conf.compute.cpu_shared_set
    dedicated_spec = conf.compute.cpu_dedicated_set
    shared = frozenset(hardware.parse_cpu_spec(shared_spec)) if shared_spec else None
    dedicated = frozenset(hardware.parse_cpu_spec(dedicated_spec)) if dedicated_spec else None
    return shared, dedicated


def pinning_fallback(conf):
    """Whether nova's upgrade fallback applies to a host of nova.conf
    ``conf`` without ``cpu_dedicated_set``: pinned guests pin the shared
    CPUs and allocate VCPU. nova's libvirt driver offers the shared CPUs
    for pinning unless ``[compute] cpu_shared_set`` alone is set; the
    agent also leaves the fallback out when nova's scheduler does not ask
    for such VCPU allocations (``[workarounds]
    disable_fallback_pcpu_query``), as no pinned guest can land then."""
    if conf.workarounds.disable_fallback_pcpu_query:
        return False
    return bool(conf.vcpu_pin_set or not conf.compute.cpu_shared_set)


def reserved_huge_pages(conf):
    """nova.conf's ``reserved_huge_pages`` (a list of dicts) as the agent's
    option values (``node:N,size:S,count:C`` strings)."""
    return [
        ",".join(f"{field}:{entry[field]}" for field in ("node", "size", "count") if field in entry)
        for entry in conf.reserved_huge_pages or ()
    ]


def extra_specs(flavor):
    """The RPC API's ``extra_specs`` of a ``nova.objects.Flavor``."""
    specs = flavor.extra_specs if flavor.obj_attr_is_set("extra_specs") else None
    return {str(k): str(v) for k, v in (specs or {}).items()} or None


def image_properties(image_meta):
    """The RPC API's ``image_properties``: the NUMA and CPU properties of
    an image (a ``nova.objects.ImageMeta``, its dict, or None) as Glance
    names them (``hw_numa_cpus.0``...), or None when it has none."""
    if not image_meta:
        return None
    if not isinstance(image_meta, objects.ImageMeta):
        image_meta = objects.ImageMeta.from_dict(image_meta)
    if not image_meta.obj_attr_is_set("properties"):
        return None
    props = image_meta.properties
    found = {}
    for name in _IMAGE_SCALARS:
        value = getattr(props, name) if props.obj_attr_is_set(name) else None
        if value is not None:
            found[name] = value if isinstance(value, int) else str(value)
    if props.obj_attr_is_set("hw_numa_cpus") and props.hw_numa_cpus:
        for index, cpus in enumerate(props.hw_numa_cpus):
            found[f"hw_numa_cpus.{index}"] = hardware.format_cpu_spec(cpus, allow_ranges=True)
    if props.obj_attr_is_set("hw_numa_mem") and props.hw_numa_mem:
        for index, memory in enumerate(props.hw_numa_mem):
            found[f"hw_numa_mem.{index}"] = int(memory)
    if props.obj_attr_is_set("traits_required") and _HYPERTHREADING in props.traits_required:
        found[f"trait:{_HYPERTHREADING}"] = "required"
    return found or None


def instance_topology(flavor, image_meta, placed):
    """The ``InstanceNUMATopology`` nova's own claim would have put on the
    instance: the cells ``flavor`` and the image ask for
    (``hardware.numa_get_constraints``), each moved to its host cell with
    the agent's pinning, emulator CPUs and page size.

    :param image_meta: a ``nova.objects.ImageMeta`` or its dict.
    :param placed: the RPC API's ``numa`` of the claim or move (None for a
        guest without a NUMA request).
    :returns: the topology, or None when the guest asks for none.
    """
    if image_meta is not None and not isinstance(image_meta, objects.ImageMeta):
        image_meta = objects.ImageMeta.from_dict(image_meta)
    requested = hardware.numa_get_constraints(flavor, image_meta)
    if requested is None or not placed:
        return requested
    by_guest = {int(p["guest_cell"]): p for p in placed}
    for index, cell in enumerate(requested.cells):
        fit = by_guest.get(index)
        if fit is None:
            continue
        cell.id = int(fit["host_cell"])
        pinning = {int(vcpu): int(pcpu) for vcpu, pcpu in (fit.get("pinning") or {}).items()}
        if pinning:
            cell.pin_vcpus(*sorted(pinning.items()))
        emulator = fit.get("emulator_cpus") or ()
        cell.cpuset_reserved = set(emulator) if emulator else None
        if fit.get("pagesize_kb"):
            cell.pagesize = int(fit["pagesize_kb"])
    return requested


def pinned_cpus(topology):
    """The host CPUs an ``InstanceNUMATopology`` (or None) pins its guest
    to: its vCPUs' and its emulator threads'; empty for a floating guest."""
    found = set()
    for cell in topology.cells if topology is not None else ():
        if cell.obj_attr_is_set("cpu_pinning_raw") and cell.cpu_pinning:
            found.update(int(cpu) for cpu in cell.cpu_pinning.values())
        if cell.obj_attr_is_set("cpuset_reserved") and cell.cpuset_reserved:
            found.update(int(cpu) for cpu in cell.cpuset_reserved)
    return found


def compute_node_topology(driver_topology, view_topology):
    """``ComputeNode.numa_topology`` (nova's JSON of a ``NUMATopology``):
    the virt driver's cells (its JSON string, for what the agent does not
    track: sockets, network affinity) with the agent's CPU sets and usage
    from the compute-node view's ``numa_topology``. None when the view has
    no cells.
    """
    if not view_topology or not view_topology.get("cells"):
        return None
    reported = {}
    if driver_topology:
        reported = {c.id: c for c in objects.NUMATopology.obj_from_db_obj(driver_topology).cells}
    cells = []
    for cell in view_topology["cells"]:
        found = reported.get(int(cell["id"]))
        extra = {}
        if found is not None:
            for field in ("socket", "network_metadata"):
                if found.obj_attr_is_set(field):
                    extra[field] = getattr(found, field)
        extra.setdefault(
            "network_metadata", objects.NetworkMetadata(physnets=set(), tunneled=False)
        )
        cells.append(
            objects.NUMACell(
                id=int(cell["id"]),
                cpuset=set(cell.get("cpuset") or ()),
                pcpuset=set(cell.get("pcpuset") or ()),
                memory=int(cell["memory"]),
                cpu_usage=int(cell.get("cpu_usage") or 0),
                memory_usage=int(cell.get("memory_usage") or 0),
                pinned_cpus=set(cell.get("pinned_cpus") or ()),
                siblings=[set(s) for s in cell.get("siblings") or ()],
                mempages=[
                    objects.NUMAPagesTopology(
                        size_kb=int(p["size_kb"]),
                        total=int(p["total"]),
                        used=int(p.get("used") or 0),
                        reserved=int(p.get("reserved") or 0),
                    )
                    for p in cell.get("mempages") or ()
                ],
                **extra,
            )
        )
    return objects.NUMATopology(cells=cells)._to_json()
