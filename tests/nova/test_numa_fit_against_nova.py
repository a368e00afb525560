"""rtagent's NUMA fitter beside nova 34.0.0's on the same random cases.

Dedicated guests with the default thread policy on hosts of up to 4 cells
of 4 to 8 dedicated CPUs (siblings of 1 or 2 threads), some already pinned,
guests of 1 to 3 cells of different sizes. Wherever nova finds a fit,
rtagent finds one (its search is exact); where nova finds none and rtagent
does, the fit rtagent returns is checked to be valid, and the count of such
cases is printed (nova's fitter misses fits when guest cells differ in
size). Run by ``make test-nova`` in .venv-nova.
"""

import random

from nova import objects
from nova.virt import hardware

from rtagent.numa import fit, model

objects.register_all()

CASES = 3000


def random_case(rng):
    hosts, cpu = [], 0
    for cell_id in range(rng.randint(2, 4)):
        threads = rng.choice((1, 2))
        count = rng.choice((4, 6, 8))
        cpus = list(range(cpu, cpu + count))
        cpu += count
        siblings = tuple(frozenset(cpus[i : i + threads]) for i in range(0, count, threads))
        pinned = frozenset(rng.sample(cpus, rng.randint(0, count - 1)))
        hosts.append(
            model.HostCell(
                id=cell_id,
                cpuset=frozenset(),
                pcpuset=frozenset(cpus),
                memory_mb=8192,
                siblings=siblings,
                pinned=pinned,
            )
        )
    guests, vcpu = [], 0
    for cell_id in range(rng.randint(1, min(3, len(hosts)))):
        size = rng.randint(1, 4)
        guests.append(
            model.GuestCell(id=cell_id, memory_mb=512, pcpuset=frozenset(range(vcpu, vcpu + size)))
        )
        vcpu += size
    return tuple(hosts), tuple(guests)


def as_nova(hosts, guests):
    host = objects.NUMATopology(
        cells=[
            objects.NUMACell(
                id=h.id,
                cpuset=set(),
                pcpuset=set(h.pcpuset),
                memory=h.memory_mb,
                cpu_usage=0,
                memory_usage=0,
                pinned_cpus=set(h.pinned),
                siblings=[set(s) for s in h.siblings],
                mempages=[],
                network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False),
                socket=0,
            )
            for h in hosts
        ]
    )
    guest = objects.InstanceNUMATopology(
        cells=[
            objects.InstanceNUMACell(
                id=g.id,
                cpuset=set(),
                pcpuset=set(g.pcpuset),
                memory=g.memory_mb,
                cpu_policy="dedicated",
            )
            for g in guests
        ]
    )
    return host, guest


def nova_fit_is_valid(hosts, guests, theirs):
    """Whether nova's answer pins every guest vCPU to a distinct free CPU
    of a distinct host cell (nova sometimes returns a cell without pinning)."""
    by_id = {h.id: h for h in hosts}
    if len({c.id for c in theirs.cells}) != len(guests):
        return False
    for guest, placed in zip(guests, theirs.cells, strict=True):
        pinning = placed.cpu_pinning if placed.obj_attr_is_set("cpu_pinning_raw") else None
        if not pinning or set(pinning) != set(guest.pcpuset):
            return False
        pcpus = list(pinning.values())
        if len(set(pcpus)) != len(pcpus) or not set(pcpus) <= by_id[placed.id].free_pcpus:
            return False
    return True


def test_every_valid_fit_nova_finds_rtagent_finds_and_more():
    rng = random.Random(20261124)
    counts = dict.fromkeys(("nova_valid", "nova_invalid", "rtagent", "missed_by_nova"), 0)
    for _ in range(CASES):
        hosts, guests = random_case(rng)
        nova_host, nova_guest = as_nova(hosts, guests)
        theirs = hardware.numa_fit_instance_to_host(nova_host, nova_guest, None)
        found = fit.fit(hosts, guests)
        valid = theirs is not None and nova_fit_is_valid(hosts, guests, theirs)
        if valid:
            counts["nova_valid"] += 1
            assert found is not None, (hosts, guests)
        elif theirs is not None:
            counts["nova_invalid"] += 1
        if found is not None:
            counts["rtagent"] += 1
            by_id = {h.id: h for h in hosts}
            for guest, placed in zip(guests, found, strict=True):
                pcpus = [p for _, p in placed.pinning]
                assert len(set(pcpus)) == len(guest.pcpuset)
                assert set(pcpus) <= by_id[placed.host_cell].free_pcpus
            if not valid:
                counts["missed_by_nova"] += 1
    figures = " ".join(f"{k}={v}" for k, v in counts.items())
    print(f"\nnuma_fit_vs_nova cases={CASES} {figures}")
    assert counts["rtagent"] >= counts["nova_valid"] > 0
