# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""CPU probe: how many host CPUs guests can use."""

from rtagent.virt import errors

# conn.getInfo() is [model, memory MiB, cpus, mhz, nodes, sockets, cores,
# threads]; index 2 is the number of active CPUs.
_INFO_CPUS = 2


def online_cpus(cpu_map=None, info=None):
    """Count the host CPUs that are online.

    Offline CPUs cannot run guests, so they must not count as VCPU
    inventory; ``getCPUMap`` is the source that knows which are online.
    ``getInfo``'s CPU count is used only when the driver does not support
    ``getCPUMap`` (``cpu_map`` is None).

    :param cpu_map: ``conn.getCPUMap()``: ``(ncpus, [online bool per CPU],
        nonline)``, or None if unsupported.
    :param info: ``conn.getInfo()``, used only without ``cpu_map``.
    :returns: the number of online CPUs (int, >= 1).
    :raises rtagent.virt.errors.HostReadError: neither fact gives a count.
    """
    if cpu_map is not None:
        try:
            _ncpus, online, _nonline = cpu_map
            # The bitmap is the fact; nonline is libvirt's count of it.
            count = sum(1 for cpu in online if cpu)
        except (TypeError, ValueError) as exc:
            raise errors.HostReadError(what="CPU map", reason=f"unexpected {cpu_map!r}") from exc
        source = "CPU map"
    elif info is not None:
        try:
            count = int(info[_INFO_CPUS])
        except (TypeError, ValueError, IndexError) as exc:
            raise errors.HostReadError(what="node info", reason=f"unexpected {info!r}") from exc
        source = "node info"
    else:
        raise errors.HostReadError(what="CPU count", reason="neither CPU map nor node info")
    if count < 1:
        raise errors.HostReadError(what=source, reason=f"{count} online CPUs")
    return count
