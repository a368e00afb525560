# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""NUMA probe: cells with CPUs, siblings, memory, page sizes and distances.

Input is the ``<host><topology><cells>`` element of ``getCapabilities()``.
A host without it (libvirt's test driver from a file, some containers)
yields no cells; that is not an error.
"""

from rtagent.virt import errors, host
from rtagent.virt.libvirt.probes import xmlutil

WHAT = "NUMA topology"
_KIB_PER_MIB = 1024


def parse_cpu_list(text, what=WHAT):
    """Parse libvirt's CPU list syntax (``0-3,8,10-11``) into a frozenset."""
    cpus = set()
    for raw in (text or "").split(","):
        part = raw.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError as exc:
            raise errors.HostReadError(what=what, reason=f"bad CPU list {text!r}") from exc
        if first > last or first < 0:
            raise errors.HostReadError(what=what, reason=f"bad CPU range {part!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def cells(root):
    """Read the NUMA cells from parsed capabilities.

    :returns: tuple of :class:`rtagent.virt.host.NumaCell` sorted by id.
    :raises rtagent.virt.errors.HostReadError: a cell is malformed or two
        cells claim the same CPU.
    """
    result = []
    seen = {}
    for cell in root.findall("host/topology/cells/cell"):
        cell_id = xmlutil.int_attr(cell, "id", WHAT)
        mem = cell.find("memory")
        memory_mb = xmlutil.kib(mem, WHAT) // _KIB_PER_MIB if mem is not None else 0
        cpus = []
        for cpu in cell.findall("cpus/cpu"):
            cpu_id = xmlutil.int_attr(cpu, "id", WHAT)
            if cpu_id in seen:
                raise errors.HostReadError(
                    what=WHAT, reason=f"CPU {cpu_id} in cells {seen[cpu_id]} and {cell_id}"
                )
            seen[cpu_id] = cell_id
            siblings = parse_cpu_list(cpu.get("siblings")) or frozenset({cpu_id})
            cpus.append(
                host.NumaCpu(
                    id=cpu_id,
                    # Offline CPUs are listed without topology attributes.
                    socket_id=xmlutil.int_attr(cpu, "socket_id", WHAT, default=-1),
                    core_id=xmlutil.int_attr(cpu, "core_id", WHAT, default=-1),
                    siblings=siblings,
                )
            )
        pages = tuple(
            sorted(
                (xmlutil.int_attr(p, "size", WHAT), xmlutil.int_text(p, WHAT))
                for p in cell.findall("pages")
            )
        )
        distances = tuple(
            sorted(
                (xmlutil.int_attr(s, "id", WHAT), xmlutil.int_attr(s, "value", WHAT))
                for s in cell.findall("distances/sibling")
            )
        )
        result.append(
            host.NumaCell(
                id=cell_id,
                memory_mb=memory_mb,
                cpus=tuple(sorted(cpus, key=lambda c: c.id)),
                pages=pages,
                distances=distances,
            )
        )
    return tuple(sorted(result, key=lambda c: c.id))
