# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Domains probe: the guests on the host, from one bulk stats call.

The driver calls ``getAllDomainStats`` once for state, vCPU and balloon
stats of every domain. A real QEMU daemon fills all of them, for running and
shut-off domains alike. Drivers that lack the vCPU or balloon groups (the
libvirt *test* driver returns only ``state.*``) make the driver fall back to
one ``dom.info()`` per domain; :func:`needs_info` says when.
"""

import dataclasses

from rtagent.virt import errors, host

STATE = "state.state"
VCPUS = "vcpu.current"
BALLOON_CURRENT = "balloon.current"
BALLOON_MAXIMUM = "balloon.maximum"
BLOCK_COUNT = "block.count"

# dom.info() is [state, max memory KiB, memory KiB, vcpus, cpu time ns].
_INFO_STATE = 0
_INFO_MEMORY_KIB = 2
_INFO_VCPUS = 3
_INFO_LEN = 4
_KIB_PER_MIB = 1024


def needs_info(stats):
    """Tell whether a domain's stats lack a value only ``dom.info()`` has.

    :param stats: the domain's dict from ``getAllDomainStats``.
    :returns: True if state, vCPUs or memory is missing.
    """
    return (
        STATE not in stats
        or VCPUS not in stats
        or (BALLOON_CURRENT not in stats and BALLOON_MAXIMUM not in stats)
    )


def domain(uuid, name, stats, info=None):
    """Build one :class:`~rtagent.virt.host.DomainInfo`.

    Stats win over ``info`` when both have a value. Memory is the balloon's
    current size (what the guest holds now), else its maximum; KiB are
    rounded up to MiB so usage is never under-counted.

    :param uuid: ``dom.UUIDString()``.
    :param name: ``dom.name()``.
    :param stats: the domain's dict from ``getAllDomainStats``.
    :param info: ``dom.info()``, or None when the stats were complete.
    :returns: a ``DomainInfo`` (memory in MiB).
    :raises rtagent.virt.errors.HostReadError: a value is in neither source.
    """
    if info is not None and len(info) < _INFO_LEN:
        raise errors.HostReadError(what=f"info of domain {uuid}", reason=f"got {info!r}")
    get = stats.get
    state = get(STATE)
    vcpus = get(VCPUS)
    memory_kib = get(BALLOON_CURRENT)
    if memory_kib is None:
        memory_kib = get(BALLOON_MAXIMUM)
    if info is not None:
        state = info[_INFO_STATE] if state is None else state
        vcpus = info[_INFO_VCPUS] if vcpus is None else vcpus
        memory_kib = info[_INFO_MEMORY_KIB] if memory_kib is None else memory_kib
    if state is None or vcpus is None or memory_kib is None:
        missing = [
            what
            for what, value in (("state", state), ("vcpus", vcpus), ("memory", memory_kib))
            if value is None
        ]
        raise errors.HostReadError(
            what=f"domain {uuid} ({name})", reason=f"no {', '.join(missing)} in stats or info"
        )
    return host.DomainInfo(
        uuid,
        name,
        int(state),
        int(vcpus),
        -(-int(memory_kib) // _KIB_PER_MIB),
        block_disks(stats) if BLOCK_COUNT in stats else (),
    )


def block_disks(stats):
    """``((path, capacity, physical), ...)`` from a domain's block stats.

    Disks without a path (empty CD-ROMs) or without sizes are skipped;
    ``physical`` falls back to ``allocation`` when missing.
    """
    disks = []
    for i in range(int(stats.get(BLOCK_COUNT, 0))):
        path = stats.get(f"block.{i}.path")
        capacity = stats.get(f"block.{i}.capacity")
        physical = stats.get(f"block.{i}.physical", stats.get(f"block.{i}.allocation"))
        if path and capacity is not None and physical is not None:
            disks.append((path, int(capacity), int(physical)))
    return tuple(disks)


class DomainCache(dict):
    """What :func:`domains` keeps across readings: UUID -> (record,
    DomainInfo), in ``ordered`` the tuple the last reading returned and in
    ``source`` the records it was built from."""

    ordered = None
    source = None

    def clear(self):
        super().clear()
        self.ordered = None
        self.source = None


def domains(records, cache=None):
    """Build the host's domain list.

    :param records: iterable of ``(uuid, name, stats, info)`` as taken by
        :func:`domain`, optionally followed by the domain's host devices and
        the host CPUs it is pinned to.
    :param cache: a dict (best a :class:`DomainCache`) kept by the caller
        across readings: a domain whose record is unchanged reuses the
        DomainInfo built last time (at steady state that is every domain,
        and building is most of the audit's own cost). Updated in place;
        gone domains are dropped.
    :returns: a tuple of ``DomainInfo`` sorted by UUID; with a
        :class:`DomainCache` and nothing changed, the very tuple returned
        last time (readers compare it by identity, cheaply).
    :raises rtagent.virt.errors.HostReadError: as :func:`domain`.
    """
    previous = cache if cache is not None else {}
    ordered = getattr(cache, "ordered", None)
    if ordered is not None:
        if records is cache.source:
            # The very records of last time (the facts' steady reading).
            return ordered
        records = records if isinstance(records, (list, tuple)) else list(records)
        if len(records) == len(previous) and _unchanged(records, previous.get):
            # As many domains as last time, each found with the same record:
            # the same set, so last time's tuple holds (readers compare it by
            # identity). The steady reading stops here, having stored nothing.
            cache.source = records
            return ordered
    current = {}
    rebuilt = False
    for record in records:
        uuid = record[0]
        hit = previous.get(uuid)
        if hit is not None and hit[0] == record:
            current[uuid] = hit
            continue
        rebuilt = True
        dom = domain(*record[:4])
        if len(record) > 4 and record[4]:
            dom = dataclasses.replace(dom, host_devices=tuple(record[4]))
        if len(record) > 5 and record[5]:
            dom = dataclasses.replace(dom, pinned_cpus=frozenset(record[5]))
        current[uuid] = (record, dom)
    # Every domain found unchanged, and as many as last time: the same set,
    # so last time's sorted tuple still holds (sorting is O(N log N) a tick).
    if rebuilt or ordered is None or len(current) != len(previous):
        ordered = tuple(entry[1] for _, entry in sorted(current.items()))
        if cache is not None:
            cache.clear()
            cache.update(current)
            if isinstance(cache, DomainCache):
                cache.ordered = ordered
    if isinstance(cache, DomainCache):
        cache.source = records
    return ordered


def _unchanged(records, cached):
    """Whether every record is the one cached for its UUID."""
    for record in records:
        hit = cached(record[0])
        if hit is None or hit[0] != record:
            return False
    return True
