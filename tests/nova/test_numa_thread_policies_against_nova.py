"""rtagent's NUMA fitter beside nova 34.0.0's, every CPU and thread policy.

3,000 random cases: hosts of 1 to 4 cells, SMT (2 or 4 threads a core) or
not, dedicated, split (some threads of a core shared) or nova's legacy
layout (one set for both), some CPUs pinned, some in neither set (nova's
sibling lists leave them out; rtagent is given the whole cores); guests of
1 to 3 cells of different sizes, shared, dedicated or mixed, every thread
policy, emulator threads isolated or not, with or without limits.

Four answers for each case:

- nova's: ``hardware.numa_fit_instance_to_host``;
- nova's rules, searched exactly: nova's own cell fit
  (``hardware._numa_fit_instance_cell``) on fresh copies for every pair of
  host and guest cell, and every assignment of guest cells to host cells;
- the brute-force oracle of ``tests/unit/numa/test_fit_oracle.py`` (the
  rules as rtagent states them);
- rtagent's ``fit``.

The oracle must agree with nova's rules searched exactly (the rules are
nova's), rtagent with the oracle (its search is exact), and every fit
rtagent returns must obey the rules. Where nova's answer differs from
rtagent's, the difference is classified automatically; all must be nova's
search bugs (it caches cell fits by an id it overwrites while fitting):

- ``refused_fit_exists_cells_differ``: nova finds nothing though its own
  cell fit accepts a complete assignment, the guest cells differing in size;
- ``refused_fit_exists_same_size``: the same, cells of one size;
- ``accepted_no_fit``: nova returns a layout and none exists (a cell
  unpinned, or pinned as checked on another host cell);
- ``accepted_invalid_fit_exists``: nova's layout breaks a rule, rtagent's
  (valid) fit exists;
- ``unexplained``: anything else. Must be 0.

Run by ``make test-nova`` in .venv-nova; prints one line of figures.
"""

import collections
import itertools
import logging
import random

from nova import objects
from nova.virt import hardware

from rtagent.numa import fit, model
from tests.unit.numa import test_fit_oracle as oracle

objects.register_all()

CASES = 3000
SEED = 20261125
POLICIES = (None, model.PREFER, model.ISOLATE, model.REQUIRE)


def random_host(rng):
    """(rtagent's cells, nova's cells' sibling lists): rtagent is given
    whole cores, nova the cores within its sets, as its driver lists them."""
    threads = rng.choice((1, 1, 2, 2, 2, 4))
    layout = rng.choice(("dedicated", "dedicated", "split", "legacy"))
    cells, nova_siblings, cpu = [], [], 0
    for cell_id in range(rng.randint(1, 4)):
        cores = [
            frozenset(range(cpu + c * threads, cpu + (c + 1) * threads))
            for c in range(rng.randint(2, max(2, 8 // threads)))
        ]
        cpus = frozenset().union(*cores)
        cpu += len(cpus)
        listed = set(cpus)
        if rng.random() < 0.2:  # one CPU in neither set (offline, or left out)
            listed.discard(rng.choice(sorted(cpus)))
        if layout == "dedicated":
            shared, dedicated = frozenset(), frozenset(listed)
        elif layout == "legacy":
            shared = dedicated = frozenset(listed)
        else:
            shared = frozenset(rng.sample(sorted(listed), rng.randint(1, max(1, len(listed) - 1))))
            dedicated = frozenset(listed) - shared
        pinned = frozenset(
            rng.sample(sorted(dedicated), rng.randint(0, max(0, len(dedicated) - 1)))
        )
        cells.append(
            model.HostCell(
                id=cell_id,
                cpuset=shared,
                pcpuset=dedicated,
                memory_mb=4096,
                siblings=tuple(cores),
                pinned=pinned,
                cpu_usage=rng.randint(0, len(shared)),
                memory_usage=rng.choice((0, 0, 1024, 3584)),
            )
        )
        nova_siblings.append([set(c & listed) for c in cores if c & listed])
    return tuple(cells), nova_siblings


def random_guest(rng, most):
    """(guest cells, emulator threads isolated)."""
    policy = rng.choice(("shared", "dedicated", "dedicated", "mixed", "mixed"))
    thread = rng.choice(POLICIES) if policy != "shared" else None
    count = rng.randint(1, most)
    while True:
        sizes = []
        for _ in range(count):
            if policy == "shared":
                sizes.append((rng.randint(1, 3), 0))
            elif policy == "dedicated":
                sizes.append((0, rng.randint(1, 4)))
            else:
                shared, pinned = rng.randint(0, 2), rng.randint(0, 3)
                sizes.append((shared, pinned) if shared + pinned else (1, 0))
        if policy != "mixed" or (any(s for s, _ in sizes) and any(p for _, p in sizes)):
            break
    cells, vcpu = [], 0
    for cell_id, (shared, pinned) in enumerate(sizes):
        cells.append(
            model.GuestCell(
                id=cell_id,
                memory_mb=rng.choice((256, 512, 1024)),
                cpuset=frozenset(range(vcpu, vcpu + shared)),
                pcpuset=frozenset(range(vcpu + shared, vcpu + shared + pinned)),
                thread_policy=thread or model.PREFER,
            )
        )
        vcpu += shared + pinned
    emulator = policy != "shared" and rng.random() < 0.3
    return tuple(cells), thread, emulator


def random_limits(rng):
    if rng.random() < 0.5:
        return None
    return model.Limits(
        cpu_allocation_ratio=rng.choice((1.0, 2.0)), ram_allocation_ratio=rng.choice((1.0, 1.5))
    )


# -- nova's objects -----------------------------------------------------------


def nova_host(hosts, siblings):
    return objects.NUMATopology(
        cells=[
            objects.NUMACell(
                id=h.id,
                cpuset=set(h.cpuset),
                pcpuset=set(h.pcpuset),
                memory=h.memory_mb,
                cpu_usage=h.cpu_usage,
                memory_usage=h.memory_usage,
                pinned_cpus=set(h.pinned),
                siblings=sibs,
                mempages=[],
                network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False),
                socket=0,
            )
            for h, sibs in zip(hosts, siblings, strict=True)
        ]
    )


def nova_guest(guests, thread, emulator):
    policy = oracle.guest_policy(guests)
    return objects.InstanceNUMATopology(
        cells=[
            objects.InstanceNUMACell(
                id=g.id,
                cpuset=set(g.cpuset),
                pcpuset=set(g.pcpuset),
                memory=g.memory_mb,
                cpu_policy=policy,
                cpu_thread_policy=thread,
            )
            for g in guests
        ],
        emulator_threads_policy="isolate" if emulator else None,
    )


def nova_limits(lim):
    if lim is None:
        return None
    return objects.NUMATopologyLimits(
        cpu_allocation_ratio=lim.cpu_allocation_ratio,
        ram_allocation_ratio=lim.ram_allocation_ratio,
    )


def nova_rules_fit(host, guest, limits):
    """Whether some assignment fits under nova's own cell fit, each pair
    tried on fresh copies (no cache, nothing carried over)."""
    emulator = guest.emulator_threads_isolated
    fits = {}
    for h, cell in enumerate(host.cells):
        for i, inst in enumerate(guest.cells):
            got = hardware._numa_fit_instance_cell(
                cell.obj_clone(), inst.obj_clone(), limits, 1 if emulator and i == 0 else 0
            )
            fits[h, i] = got is not None
    return any(
        all(fits[h, i] for i, h in enumerate(chosen))
        for chosen in itertools.permutations(range(len(host.cells)), len(guest.cells))
    )


def nova_layout_is_valid(hosts, guests, lim, emulator, theirs):
    """Whether nova's answer places each guest cell on its own host cell
    by the rules (pinning, thread policy, emulator CPU, memory, shared)."""
    by_id = {h.id: h for h in hosts}
    policy = oracle.guest_policy(guests)
    if len({c.id for c in theirs.cells}) != len(guests):
        return False
    for i, (guest, placed) in enumerate(zip(guests, theirs.cells, strict=True)):
        host = by_id[placed.id]
        if not oracle.memory_ok(host, guest, policy != "shared"):
            return False
        if not oracle.shared_ok(host, guest, lim, policy):
            return False
        if policy == "shared":
            continue
        pinning = placed.cpu_pinning if placed.obj_attr_is_set("cpu_pinning_raw") else None
        pinning = pinning or {}
        if set(pinning) != set(guest.pcpuset) or len(set(pinning.values())) != len(pinning):
            return False
        reserved = frozenset(placed.cpuset_reserved or ())
        if len(reserved) != (1 if emulator and i == 0 else 0):
            return False
        if oracle.policy_ok(host, guest, frozenset(pinning.values()), reserved) is None:
            return False
    return True


def cells_differ(guests):
    return len({(len(g.cpuset), len(g.pcpuset), g.memory_mb) for g in guests}) > 1


def classify(nova_answer, nova_valid, rules_fit, ours):
    if nova_answer is None:
        if ours is None:
            return "agree"
        return "refused_fit_exists" if rules_fit else "unexplained"
    if nova_valid:
        return "agree" if ours is not None else "unexplained"
    if not rules_fit:
        return "accepted_no_fit" if ours is None else "unexplained"
    return "accepted_invalid_fit_exists" if ours is not None else "unexplained"


def test_thread_policies_match_nova_but_for_its_search_bugs():
    # nova warns of bug 1889633 on every isolate guest on an SMT cell.
    logging.getLogger("nova.virt.hardware").setLevel(logging.ERROR)
    rng = random.Random(SEED)
    tally = collections.Counter()
    shapes = collections.Counter()
    wrong = []
    for case in range(CASES):
        hosts, siblings = random_host(rng)
        guests, thread, emulator = random_guest(rng, min(3, len(hosts)))
        lim = random_limits(rng)
        host, limits = nova_host(hosts, siblings), nova_limits(lim)
        guest = nova_guest(guests, thread, emulator)
        theirs = hardware.numa_fit_instance_to_host(host, guest.obj_clone(), None, limits)
        rules_fit = nova_rules_fit(host, guest, limits)
        exists = oracle.exists(hosts, guests, lim, emulator)
        ours = fit.fit(hosts, guests, lim, emulator_isolate=emulator)

        shapes[oracle.guest_policy(guests), thread or "default", "emulator" * emulator] += 1
        if exists != rules_fit:
            tally["oracle_vs_nova_rules"] += 1
            wrong.append(("oracle", case, hosts, siblings, guests, thread, emulator, lim))
        if (ours is not None) != exists:
            tally["rtagent_vs_oracle"] += 1
            wrong.append(("rtagent", case, hosts, guests, emulator, lim, ours))
        if ours is not None:
            try:
                oracle.check_fit(hosts, guests, lim, emulator, ours)
            except AssertionError:
                tally["rtagent_invalid"] += 1
                wrong.append(("invalid", case, hosts, guests, emulator, lim, ours))
            tally["rtagent_fits"] += 1
        valid = theirs is not None and nova_layout_is_valid(hosts, guests, lim, emulator, theirs)
        tally["nova_valid_fits"] += valid
        kind = classify(theirs, valid, rules_fit, ours)
        if kind == "refused_fit_exists":
            kind += "_cells_differ" if cells_differ(guests) else "_same_size"
        tally[kind] += 1
        if kind == "unexplained":
            wrong.append(("unexplained", case, hosts, siblings, guests, thread, emulator, lim))

    disagreements = CASES - tally["agree"]
    order = (
        "agree",
        "refused_fit_exists_cells_differ",
        "refused_fit_exists_same_size",
        "accepted_no_fit",
        "accepted_invalid_fit_exists",
        "unexplained",
        "oracle_vs_nova_rules",
        "rtagent_vs_oracle",
        "rtagent_invalid",
        "rtagent_fits",
        "nova_valid_fits",
    )
    figures = " ".join(f"{k}={tally[k]}" for k in order)
    print(f"\nnuma_thread_policies_vs_nova cases={CASES} disagreements={disagreements} {figures}")
    print(
        "shapes " + " ".join(f"{'/'.join(filter(None, k))}={v}" for k, v in sorted(shapes.items()))
    )
    assert not wrong, wrong[:3]
    # Every class is nova's search; its refusals need guest cells that differ.
    assert tally["refused_fit_exists_same_size"] == 0
    assert tally["rtagent_fits"] >= tally["nova_valid_fits"] > 0
