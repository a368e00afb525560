# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""CPU sets probe: ``[compute] cpu_shared_set`` / ``cpu_dedicated_set``.

The syntax is nova's (``0-3,^2,8``: ranges, single ids, ``^`` exclusions).
Sets are checked against the host: every id must be an online CPU and the
two sets must not overlap, as nova-compute refuses to start otherwise. The
PCPU inventory built from the dedicated set comes with the NUMA work; here
the sets are parsed, checked and carried in the host view.
"""

from rtagent import cpuspec
from rtagent.virt.errors import InvalidCPUSet


def parse_cpu_spec(option, spec):
    """Parse nova's CPU spec syntax into a frozenset of CPU ids.

    :param option: the option name, for the error message.
    :param spec: e.g. ``"0-7,^3,12"``; None or blank means unset.
    :returns: a frozenset, or None when unset.
    :raises InvalidCPUSet: bad syntax, a reversed range, or an empty result.
    """
    if spec is None or not spec.strip():
        return None
    try:
        cpus = cpuspec.parse(spec)
    except ValueError as exc:
        raise InvalidCPUSet(option=option, value=spec, reason=str(exc)) from exc
    if not cpus:
        raise InvalidCPUSet(option=option, value=spec, reason="selects no CPU")
    return cpus


def check_cpu_sets(shared, dedicated, online):
    """Check parsed sets against the host's online CPUs.

    :param shared: frozenset from ``cpu_shared_set``, or None.
    :param dedicated: frozenset from ``cpu_dedicated_set``, or None.
    :param online: frozenset of the host's online CPU ids.
    :returns: ``(shared, dedicated)`` unchanged.
    :raises InvalidCPUSet: an id is not an online CPU, or the sets overlap.
    """
    for option, cpus in (("cpu_shared_set", shared), ("cpu_dedicated_set", dedicated)):
        if cpus is None:
            continue
        unknown = cpus - online
        if unknown:
            raise InvalidCPUSet(
                option=option,
                value=format_cpu_set(cpus),
                reason=f"CPUs {format_cpu_set(unknown)} are not online CPUs of this host "
                f"(online: {format_cpu_set(online)})",
            )
    if shared is not None and dedicated is not None and shared & dedicated:
        raise InvalidCPUSet(
            option="cpu_dedicated_set",
            value=format_cpu_set(dedicated),
            reason=f"overlaps cpu_shared_set on CPUs {format_cpu_set(shared & dedicated)}",
        )
    return shared, dedicated


def online_ids(cpu_map):
    """The online CPU ids from ``conn.getCPUMap()`` (None -> empty set)."""
    if cpu_map is None:
        return frozenset()
    _ncpus, online, _nonline = cpu_map
    return frozenset(i for i, up in enumerate(online) if up)


def format_cpu_set(cpus):
    """``{0,1,2,5}`` -> ``'0-2,5'``."""
    out, run = [], []
    for cpu in sorted(cpus):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(_run(run))
        run = [cpu]
    if run:
        out.append(_run(run))
    return ",".join(out)


def _run(run):
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"
