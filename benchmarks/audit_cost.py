"""Cost of one host audit on libvirt's test driver, for 10, 100 and 1000 domains.

Prints key=value lines, the last a summary:

    domains=N audit_cpu_ms=T libvirt_calls=C first_calls=F
    domains=1000 bare_cpu_ms=B
    ratio_vs_bare=R ratio_vs_bare_spread=LO..HI ratio_vs_bare_reps=K target<=1.5 verdict=V
    summary calls_constant=yes|no ratio_vs_bare=R ratio_vs_bare_spread=LO..HI
        ratio_vs_bare_reps=K target_ratio=1.5 PASS|MISS|VOID

``audit_cpu_ms`` is the median CPU time (``time.process_time``: the test
driver runs in this process) of steady-state audits (the connection open,
per-connection facts read, domains seen before); ``first_calls`` is the
first audit after opening (it reads each domain's info once: the test
driver's bulk stats carry only the state). ``bare_cpu_ms`` is the same
libvirt calls made directly with no parsing or probes, so ``ratio_vs_bare``
is what the audit adds on top of libvirt.

At N=1000 the audit and the bare calls run in turn (A B, B A, ...;
``benchmarks.common.spread.interleaved``), each round giving one ratio;
``ratio_vs_bare`` is the median of the rounds' ratios and its ``_spread``
that median's 95% confidence interval. CPU time, not wall time: another
process on the machine takes wall time from both sides unevenly (a wall
ratio read 1.63 once beside a test run, 1.03-1.46 idle). PASS when the
median is within 1.5 and the spread's top within 1.65 (the target + 10%);
MISS when the median is above 1.5 and the spread's bottom above 1.35;
VOID otherwise (the spread straddles the target by more than 10%). A
libvirt call count that grows with N is a MISS whatever the timings.
"""

import argparse
import os
import statistics
import sys
import tempfile

import libvirt

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import spread
from benchmarks.common.verdict import run as run_benchmark
from rtagent.virt.libvirt import LibvirtDriver
from rtagent.virt.libvirt.facts import DOMAIN_STATES

# Rounds (a round at N=1000 is about 15 ms of CPU here): the spread of the
# judged ratio narrows with them.
REPEAT = 101
SIZES = (10, 100, 1000)
TARGET = 1.5


def host_xml(n):
    doms = []
    for i in range(n):
        state = (1, 3, 5)[i % 3]
        doms.append(
            f"<domain type='test'><name>vm-{i}</name>"
            f"<uuid>00000000-0000-4000-8000-{i:012d}</uuid>"
            f"<memory>{1048576 * (1 + i % 4)}</memory><vcpu>{1 + i % 8}</vcpu>"
            f"<os><type>hvm</type></os><test:runstate>{state}</test:runstate></domain>"
        )
    return (
        "<node xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>"
        "<cpu><mhz>2400</mhz><model>x86_64</model><nodes>1</nodes><sockets>2</sockets>"
        "<cores>8</cores><threads>2</threads></cpu><memory>268435456</memory>"
        + "".join(doms)
        + "</node>"
    )


def cpu_ms(*fns):
    """The CPU ms of each of ``fns`` per round, run in turn REPEAT times:
    interleaving keeps a burst of load elsewhere on the machine from
    landing on one side of a ratio only."""
    return [[s * 1000 for s in samples] for samples in spread.interleaved(fns, REPEAT)]


def bare_calls(conn):
    # What a steady-state audit asks libvirt, with nothing done on the answers.
    conn.getInfo()
    conn.getCPUMap()
    conn.getType()
    conn.getVersion()
    conn.getHostname()
    for dom, _stats in conn.getAllDomainStats(DOMAIN_STATES, 0):
        dom.UUIDString()
        dom.name()


def forgetful(driver):
    """``driver.read_host`` with the per-domain caches emptied first (the
    last reading kept whole too: without it, a steady host's records come
    back from it and only the domain probe's work shows, not the calls)."""

    def read_host():
        driver._info_cache.clear()
        driver._domain_cache.clear()
        driver._domain_reading.clear()
        return driver.read_host()

    return read_host


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--forget-domains",
        action="store_true",
        help="negative control: forget every domain before each audit (must MISS)",
    )
    args = parser.parse_args()
    libvirt.registerErrorHandler(lambda *_a: None, None)
    results = {}
    with tempfile.TemporaryDirectory(prefix="rtagent-bench-") as tmp:
        for n in SIZES:
            path = os.path.join(tmp, f"host-{n}.xml")
            with open(path, "w") as f:
                f.write(host_xml(n))
            uri = f"test://{path}"
            driver = LibvirtDriver(uri, tmp)
            view = driver.read_host()
            assert len(view.domains) == n, (len(view.domains), n)
            first = driver.last_call_count
            audit = forgetful(driver) if args.forget_domains else driver.read_host
            if n == SIZES[-1]:
                conn = libvirt.open(uri)
                audits, bares = cpu_ms(audit, lambda c=conn: bare_calls(c))
                conn.close()
            else:
                (audits,) = cpu_ms(audit)
            calls = driver.last_call_count
            driver.close()
            audit_ms = statistics.median(audits)
            results[n] = (audit_ms, calls)
            print(
                f"domains={n} audit_cpu_ms={audit_ms:.2f} libvirt_calls={calls} first_calls={first}"
            )
        print(f"domains={SIZES[-1]} bare_cpu_ms={statistics.median(bares):.2f}")
    constant = len({calls for _ms, calls in results.values()}) == 1
    ratio = spread.judge("ratio_vs_bare", spread.ratios(audits, bares), TARGET)
    print(ratio.line())
    verdict = spread.combine([ratio.verdict, spread.PASS if constant else spread.MISS])
    print(
        f"summary calls_constant={'yes' if constant else 'no'} "
        f"{ratio.fields()} target_ratio={TARGET:g} {verdict}"
    )
    return 0 if verdict == spread.PASS else 1


if __name__ == "__main__":
    sys.exit(run_benchmark(main))
