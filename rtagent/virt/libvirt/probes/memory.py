# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Memory probe: host memory, as libvirt reports it."""

from rtagent.virt import errors

# virNodeGetInfo's list: index 1 is the host memory in MiB (the C struct
# holds KiB; the Python binding divides by 1024).
_INFO_MEMORY_MB = 1


def memory_mb(info):
    """Return the host's memory in MiB from ``conn.getInfo()``.

    libvirt's total is used on purpose, not /proc/meminfo: it is the memory
    the hypervisor can give guests, and it is the figure nova-compute
    reports as MEMORY_MB, so a Nova scheduler sees the same inventory from
    us. (On a host that is itself a VM the two sources differ.)

    :param info: ``conn.getInfo()``: ``[model, memory MiB, cpus, mhz,
        nodes, sockets, cores, threads]``.
    :returns: memory in MiB (int, >= 1).
    :raises rtagent.virt.errors.HostReadError: ``info`` has no usable size.
    """
    try:
        mb = int(info[_INFO_MEMORY_MB])
    except (TypeError, ValueError, IndexError) as exc:
        raise errors.HostReadError(what="node info", reason=f"unexpected {info!r}") from exc
    if mb < 1:
        raise errors.HostReadError(what="node memory", reason=f"{mb} MiB")
    return mb
