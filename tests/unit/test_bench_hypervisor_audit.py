"""The pure parts of benchmarks/hypervisor_audit.py: calls split into those
that reach libvirtd and client-side accessors, /proc CPU fields, and the
run's verdict from its counts and its CPU gate."""

import pytest

from benchmarks import hypervisor_audit as bench
from benchmarks.common import spread

SIZES = (0, 8, 32)


def test_client_side_accessors_are_not_daemon_calls():
    counts = {
        "virConnect.getAllDomainStats": 1,
        "virConnect.getInfo": 1,
        "virDomain.UUIDString": 32,
        "virDomain.name": 32,
        "virDomain.XMLDesc": 32,
    }
    assert bench.split_calls(counts) == (34, 64)
    assert bench.split_calls({}) == (0, 0)


def test_proc_cpu_fields():
    assert bench.schedstat_ns("123456789 2000 7\n") == 123456789
    # A command name with spaces and a parenthesis: fields counted from the last ")".
    stat = "42 (rpc worker) x) S 1 42 42 0 -1 4194560 10 0 0 0 250 75 0 0 20 0 8"
    assert bench.stat_ticks(stat) == 325


def test_counts_are_formatted_most_frequent_first():
    counts = {"virDomain.name": 8, "virConnect.getInfo": 1, "virDomain.XMLDesc": 8}
    assert bench.format_counts(counts) == (
        "virDomain.XMLDesc:8,virDomain.name:8,virConnect.getInfo:1"
    )
    assert bench.format_counts({}) == "-"


def judged(verdict):
    return spread.Judged("cpu_ratio_vs_nova_n32", 0.05, 0.04, 0.06, 61, 0.1, 0.1, False, verdict)


def figures(rtagent_calls=(9, 9, 9), nova_calls=(40, 90, 240), rtagent_seen=SIZES):
    calls = {
        "rtagent": dict(zip(SIZES, rtagent_calls, strict=True)),
        "nova": dict(zip(SIZES, nova_calls, strict=True)),
    }
    seen = {"rtagent": dict(zip(SIZES, rtagent_seen, strict=True)), "nova": {n: n for n in SIZES}}
    return calls, seen


@pytest.mark.parametrize(
    ("fig", "gate", "want", "constant", "voids"),
    [
        (figures(), spread.PASS, spread.PASS, True, []),
        (figures(), spread.VOID, spread.VOID, True, []),
        (figures(), spread.MISS, spread.MISS, True, []),
        # Calls growing with the guests: MISS whatever the CPU says.
        (figures(rtagent_calls=(9, 17, 41)), spread.PASS, spread.MISS, False, []),
        (figures(rtagent_calls=(9, 17, 41)), spread.VOID, spread.MISS, False, []),
        # A side that saw other guests than were started measured nothing.
        (
            figures(rtagent_seen=(0, 8, 31)),
            spread.PASS,
            spread.VOID,
            True,
            ["rtagent_saw_31_of_32"],
        ),
        (figures(nova_calls=(0, 90, 240)), spread.PASS, spread.VOID, True, ["nova_no_calls_at_0"]),
        (
            figures(nova_calls=(40, None, 240)),
            spread.PASS,
            spread.VOID,
            True,
            ["nova_calls_unsteady_at_8"],
        ),
    ],
)
def test_verdict(fig, gate, want, constant, voids):
    calls, seen = fig
    verdict, calls_constant, void_reasons = bench.decide(calls, seen, judged(gate), SIZES)
    assert (verdict, calls_constant) == (want, constant)
    assert void_reasons == voids
