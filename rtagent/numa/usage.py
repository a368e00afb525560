"""A guest's NUMA claim on a node, the cells a node offers, and the usage
its claims add up to. Pure values and functions.

The tracker keeps, for every claim with a NUMA topology, the guest cells
asked for and where the fitter put them (:class:`NumaClaim`). Cell usage is
never stored: it is recounted from the claims a node holds (:func:`with_usage`),
so a restart, an abort or a move can never leave a pinned CPU or a page
behind.
"""

import dataclasses

from rtagent.numa import fit, model


@dataclasses.dataclass(frozen=True)
class NumaClaim:
    """Where a guest's NUMA cells live on a node.

    :param guest_cells: the :class:`~rtagent.numa.model.GuestCell` values
        asked for, in the guest's order.
    :param fits: one :class:`~rtagent.numa.model.CellFit` per guest cell,
        in the same order.
    :param emulator_isolate: one dedicated CPU is reserved for the
        emulator threads (in the first cell's ``reserved``).
    """

    guest_cells: tuple
    fits: tuple
    emulator_isolate: bool = False

    @property
    def pinned(self):
        """Every host CPU this claim keeps for itself."""
        return frozenset().union(*(f.taken for f in self.fits)) if self.fits else frozenset()

    @property
    def pcpus(self):
        """Host CPUs the claim counts as PCPU: pinned vCPUs and the emulator's."""
        return sum(len(g.pcpuset) for g in self.guest_cells) + (1 if self.emulator_isolate else 0)

    def to_dict(self):
        return {
            "emulator_isolate": self.emulator_isolate,
            "cells": [
                {
                    "guest_cell": g.id,
                    "memory_mb": g.memory_mb,
                    "cpuset": sorted(g.cpuset),
                    "pcpuset": sorted(g.pcpuset),
                    "pagesize": g.pagesize,
                    "thread_policy": g.thread_policy,
                    "host_cell": f.host_cell,
                    "pinning": [list(pair) for pair in f.pinning],
                    "taken": sorted(f.taken),
                    "reserved": sorted(f.reserved),
                    "pagesize_kb": f.pagesize_kb,
                }
                for g, f in zip(self.guest_cells, self.fits, strict=True)
            ],
        }

    @classmethod
    def from_dict(cls, data):
        guests, fits = [], []
        for cell in data["cells"]:
            guests.append(
                model.GuestCell(
                    id=cell["guest_cell"],
                    memory_mb=cell["memory_mb"],
                    cpuset=frozenset(cell["cpuset"]),
                    pcpuset=frozenset(cell["pcpuset"]),
                    pagesize=cell["pagesize"],
                    thread_policy=cell["thread_policy"],
                )
            )
            fits.append(
                model.CellFit(
                    guest_cell=cell["guest_cell"],
                    host_cell=cell["host_cell"],
                    pinning=tuple(tuple(pair) for pair in cell["pinning"]),
                    taken=frozenset(cell["taken"]),
                    reserved=frozenset(cell["reserved"]),
                    pagesize_kb=cell["pagesize_kb"],
                )
            )
        return cls(tuple(guests), tuple(fits), bool(data.get("emulator_isolate", False)))

    def describe(self):
        """One line per guest cell, for replies and logs."""
        return [
            {
                "guest_cell": f.guest_cell,
                "host_cell": f.host_cell,
                "pinning": {str(v): p for v, p in f.pinning},
                "emulator_cpus": sorted(f.reserved),
                "pagesize_kb": f.pagesize_kb,
            }
            for f in self.fits
        ]


def host_cells(
    numa_cells, shared=None, dedicated=None, reserved_pages=(), online=None, *, fallback=False
):
    """The cells a node offers, before any claim.

    :param numa_cells: the host's cells (``HostView.numa_cells``: id,
        memory_mb, cpus with siblings, pages).
    :param shared: ``cpu_shared_set``, or None.
    :param dedicated: ``cpu_dedicated_set``, or None. Without it no CPU is
        dedicated, unless ``fallback``.
    :param reserved_pages: ``((cell id, size KiB, count), ...)`` the
        operator keeps for the host (``[DEFAULT] reserved_huge_pages``).
    :param online: the host's online CPU ids, or None (unknown): without
        either set, a cell's shared CPUs are its online ones.
    :param fallback: nova's upgrade fallback: without ``dedicated``, a
        cell's shared CPUs may be pinned too (``pcpuset`` = ``cpuset``, as
        nova's libvirt driver reports them then; its fitter reads the
        equal sets as the legacy configuration).
    """
    reserved = {(cell, size): count for cell, size, count in reserved_pages}
    cells = []
    for cell in numa_cells:
        cpus = cell.cpu_ids
        if shared is not None:
            cpuset = cpus & shared
        elif dedicated is not None:
            cpuset = frozenset()
        else:
            cpuset = cpus & online if online is not None else cpus
        if dedicated:
            pcpuset = cpus & dedicated
        else:
            pcpuset = cpuset if fallback else frozenset()
        # Trimmed to the cell's CPU sets, single threads kept, as nova's
        # libvirt driver reports them (what its filters read).
        usable = cpuset | pcpuset
        siblings = sorted(
            {frozenset(c.siblings) & usable for c in cell.cpus if c.siblings} - {frozenset()},
            key=min,
        )
        pages = tuple(
            model.Pages(size_kb=size, total=total, reserved=reserved.get((cell.id, size), 0))
            for size, total in cell.pages
        )
        cells.append(
            model.HostCell(
                id=cell.id,
                cpuset=frozenset(cpuset),
                pcpuset=frozenset(pcpuset),
                memory_mb=cell.memory_mb,
                siblings=tuple(siblings),
                pages=pages,
                socket=cell.socket,
            )
        )
    return tuple(cells)


@dataclasses.dataclass(frozen=True)
class NumaUsage:
    """What a set of NUMA claims uses, per host cell: how many claims keep
    each CPU, shared vCPUs, memory, and pages per size. Carried from state
    to state and changed by the one claim an operation adds or removes
    (:meth:`changed`), so that a NUMA claim costs the same whatever the
    number of guests.

    :param cells: host cell id -> ``(pinned, cpu_usage, memory_usage,
        pages)``, ``pinned`` a mapping CPU -> count, ``pages`` size KiB ->
        pages. Treat as read-only.
    """

    cells: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, claims):
        return cls().changed(added=claims)

    def changed(self, removed=(), added=()):
        """This usage less the ``removed`` claims plus the ``added`` ones
        (iterables of NumaClaim). Copies only the cells they touch."""
        cells = dict(self.cells)
        copied = set()
        for claims, sign in ((removed, -1), (added, 1)):
            for claim in claims:
                for guest, placed in zip(claim.guest_cells, claim.fits, strict=True):
                    host = placed.host_cell
                    if host not in copied:
                        pinned, cpu, memory, pages = cells.get(host, ({}, 0, 0, {}))
                        cells[host] = (dict(pinned), cpu, memory, dict(pages))
                        copied.add(host)
                    pinned, cpu, memory, pages = cells[host]
                    for pcpu in placed.taken:
                        left = pinned.get(pcpu, 0) + sign
                        if left:
                            pinned[pcpu] = left
                        else:
                            pinned.pop(pcpu, None)
                    if placed.pagesize_kb:
                        size = placed.pagesize_kb
                        pages[size] = pages.get(size, 0) + sign * (guest.memory_mb * 1024 // size)
                    cells[host] = (
                        pinned,
                        cpu + sign * len(guest.cpuset),
                        memory + sign * guest.memory_mb,
                        pages,
                    )
        return NumaUsage(cells)

    def apply(self, cells):
        """``cells`` (HostCell values) with this usage added."""
        result = []
        for cell in cells:
            used = self.cells.get(cell.id)
            if used is None:
                result.append(cell)
                continue
            pinned, cpu, memory, pages = used
            result.append(
                dataclasses.replace(
                    cell,
                    pinned=cell.pinned | frozenset(pinned),
                    cpu_usage=cell.cpu_usage + cpu,
                    memory_usage=cell.memory_usage + memory,
                    pages=tuple(
                        dataclasses.replace(p, used=p.used + pages.get(p.size_kb, 0))
                        for p in cell.pages
                    ),
                )
            )
        return tuple(result)


def with_usage(cells, claims):
    """``cells`` with the usage of ``claims`` (NumaClaim values) added."""
    return NumaUsage.of(claims).apply(cells)


def place(
    guest_cells, cells, limits, *, emulator_isolate=False, pack=False, accept=None, cell_rank=None
):
    """Fit ``guest_cells`` on ``cells`` (with their usage): a NumaClaim, or
    None when nothing fits. ``accept``, ``cell_rank``: see
    :func:`rtagent.numa.fit.fit`."""
    fits = fit.fit(
        cells,
        guest_cells,
        limits,
        emulator_isolate=emulator_isolate,
        pack=pack,
        accept=accept,
        cell_rank=cell_rank,
    )
    if fits is None:
        return None
    return NumaClaim(tuple(guest_cells), fits, emulator_isolate)


def lost_cpus(cells, claims_by_consumer):
    """consumer -> host CPUs its claim keeps that are no longer dedicated
    CPUs of the cell it is on (the host changed, or the operator's set)."""
    pcpus = {cell.id: cell.pcpuset for cell in cells}
    lost = {}
    for consumer, claim in claims_by_consumer:
        for placed in claim.fits:
            gone = placed.taken - pcpus.get(placed.host_cell, frozenset())
            if gone:
                lost.setdefault(consumer, set()).update(gone)
    return {consumer: tuple(sorted(cpus)) for consumer, cpus in sorted(lost.items())}


def refusal(guest_cells, cells, emulator_isolate=False):
    """Why ``guest_cells`` fit nowhere, in one line an operator can act on:
    what the guest asks for, and what each host cell has free."""
    pinned = sum(len(g.pcpuset) for g in guest_cells) + (1 if emulator_isolate else 0)
    shared = sum(len(g.cpuset) for g in guest_cells)
    memory = sum(g.memory_mb for g in guest_cells)
    sizes = sorted({str(g.pagesize) for g in guest_cells if g.pagesize is not None})
    asked = f"{len(guest_cells)} cell(s), {pinned} pinned and {shared} shared vCPU(s), {memory} MiB"
    if sizes:
        asked += f" on {'/'.join(sizes)} pages"
    free = "; ".join(
        f"cell {c.id}: {len(c.free_pcpus)} free dedicated CPU(s) "
        f"({sum(1 for core in c.cores() if core <= c.free_pcpus)} whole core(s)), "
        f"{c.memory_mb - c.memory_usage} MiB free"
        + "".join(f", {p.free} free {p.size_kb} KiB pages" for p in c.pages[1:])
        for c in cells
    )
    why = f"NUMA: the guest's {asked} fit on no {len(cells)}-cell layout ({free})"
    if any(g.thread_policy == "isolate" for g in guest_cells) and any(
        fit.smt_refuses_isolate(c) for c in cells
    ):
        why += "; an isolate guest fits on no cell with hyper-threads (as nova: bug 1889633)"
    return why
