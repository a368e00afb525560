"""RPC claim latency over a real RabbitMQ with 8 concurrent conductors.

An agent (libvirt test driver, real Placement process) serves API 1.0 in
this process; 8 conductor threads, each with its own transport, make
claims (and aborts, to keep room) for a fixed time. In the same run the
same conductors make empty calls (``ping``), the floor of any RPC.

Prints key=value lines; the last is the summary:
rpc_claim_p50_ms, rpc_claim_p99_ms, claims_per_s, empty_call_p50_ms,
ratio_vs_empty_call (claim p50 / empty p50; target <= 1.5).
"""

import logging
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rtagent.rpc.client import AgentClient
from rtagent.rpc.transport import get_transport
from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.rabbitmq import RabbitMQ
from tests.functional.rpc.harness import ServedAgent, make_conf

CONDUCTORS = 8
SECONDS = float(os.environ.get("RPC_BENCH_SECONDS", "8"))


def run_phase(served, url, method_args):
    """Each conductor loops for SECONDS; returns (latencies in s, error codes)."""
    latencies, lock = [], threading.Lock()
    barrier = threading.Barrier(CONDUCTORS)
    failures = []

    def conductor():
        transport = get_transport(served.conf, url=url)
        client = AgentClient(transport, served.conf.host, timeout=30)
        client.call("ping")  # connect before the clock starts
        mine = []
        barrier.wait(60)
        end = time.monotonic() + SECONDS
        try:
            while time.monotonic() < end:
                method, args, after = method_args()
                t0 = time.perf_counter()
                reply = client.call(method, **args)
                mine.append(time.perf_counter() - t0)
                if not reply["ok"]:
                    failures.append(reply["error"]["code"])
                if after:
                    client.call(after[0], **after[1])
        finally:
            with lock:
                latencies.extend(mine)
            transport.cleanup()

    threads = [threading.Thread(target=conductor) for _ in range(CONDUCTORS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, failures


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    logging.basicConfig(level=logging.WARNING)
    workdir = tempfile.mkdtemp(prefix="rtagent-bench-rpc-")
    with RabbitMQ() as broker, PlacementServer(db_sync=False) as placement:
        conf = make_conf(workdir, broker.transport_url, cpu_allocation_ratio=64.0)
        served = ServedAgent(conf, placement.endpoint)
        try:
            # Same shape as the claim phase: one timed call and one untimed
            # call per iteration, so both phases load the server alike.
            empty, _ = run_phase(served, broker.transport_url, lambda: ("ping", {}, ("ping", {})))

            def claim():
                inst = str(uuid.uuid4())
                args = {"instance_uuid": inst, "flavor": {"vcpus": 1, "memory_mb": 64}}
                # The abort is not timed: it keeps the node from filling up.
                return "instance_claim", args, ("abort_instance_claim", {"instance_uuid": inst})

            claims, failures = run_phase(served, broker.transport_url, claim)
        finally:
            served.stop()
    empty_p50 = statistics.median(empty) * 1000
    p50 = statistics.median(claims) * 1000
    p99 = pct(claims, 0.99) * 1000
    print(f"conductors={CONDUCTORS}")
    print(f"seconds_per_phase={SECONDS:g}")
    print(f"claims={len(claims)} refused={len(failures)}")
    print(f"empty_calls={len(empty)}")
    print(f"empty_call_p50_ms={empty_p50:.2f}")
    print(f"empty_call_p99_ms={pct(empty, 0.99) * 1000:.2f}")
    print(f"rpc_claim_p50_ms={p50:.2f}")
    print(f"rpc_claim_p99_ms={p99:.2f}")
    print(f"claims_per_s={len(claims) / SECONDS:.0f}")
    ratio = p50 / empty_p50
    print(f"ratio_vs_empty_call={ratio:.2f}")
    print(
        f"summary rpc_claim_p50_ms={p50:.2f} rpc_claim_p99_ms={p99:.2f} "
        f"claims_per_s={len(claims) / SECONDS:.0f} empty_call_p50_ms={empty_p50:.2f} "
        f"ratio_vs_empty_call={ratio:.2f} (target <= 1.5) {'PASS' if ratio <= 1.5 else 'MISS'}"
    )
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
