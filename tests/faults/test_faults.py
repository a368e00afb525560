"""The test cloud under faults (issue 50; ``make test-cloud-faults``;
docs/faults.md).

The same scenario runs twice over one control plane: on two hosts with
``rtagent run`` beside ``rtagent-nova-compute``, then on two hosts with
stock nova-compute. Each fault starts from empty hosts, lands at the
moment it waits for (tests/faults/faults.py), is recovered from, and is
judged (tests/faults/verdict.py): one ``fault=... tracker=...`` line each,
a summary at the end. rtagent must be clean in every fault; stock nova's
figures are the comparison and fail nothing.
"""

import time

import pytest

from tests.cloud.harness import Cloud
from tests.faults import verdict
from tests.faults.faulthosts import FaultHost
from tests.faults.faults import FAULTS

NAMES = {"rtagent": ("fr-a", "fr-b"), "nova": ("fn-a", "fn-b")}


class FaultRun:
    """One tracker's cloud and the faults it went through."""

    def __init__(self, control, figures, tracker, flavors):
        self.control = control
        self.tracker = tracker
        self.on_rtagent = tracker == "rtagent"
        self.small = flavors["small"]
        self.large = flavors["large"]
        self.flavors = flavors
        self.hosts = [FaultHost(name, control, control.workdir) for name in NAMES[tracker]]
        self.cloud = Cloud(control, self.hosts, figures)

    def start(self):
        for host in self.hosts:
            if self.on_rtagent:
                host.start_on_rtagent()
            else:
                host.start_on_stock_nova()
        self.cloud.wait_hosts_ready(f"{self.tracker}_hosts_start")

    def tails(self):
        return self.cloud.tails()

    def undergo(self, name, lines, evidence):
        """Fault ``name``, then the verdict: its :class:`~verdict.Line`
        (recorded in ``lines``)."""
        line = verdict.Line(name, self.tracker)
        lines.append(line)
        for host in self.hosts:
            host.gates.clear()
        t0 = time.monotonic()
        landed, recovered_at = FAULTS[name](self.cloud_view())
        evidence.append(
            f"evidence fault={name} tracker={self.tracker} "
            f"landed_after_s={recovered_at - t0:.1f}: {landed.strip()[:400]}"
        )
        servers = verdict.settle(self.cloud, line)
        for host in self.hosts:
            host.gates.clear()
        verdict.next_steps(self.cloud, line, servers)
        verdict.remodel(self.cloud, self.flavors)
        found = verdict.converge(self.cloud, line, recovered_at)
        self.cloud.wait_hosts_ready(f"{name}_{self.tracker}_ready")
        verdict.empty_hosts(self.cloud, line, self.control)
        return line, found

    def cloud_view(self):
        return self


@pytest.fixture(scope="class", params=["rtagent", "nova"])
def run(request, control, figures, flavors):
    made = FaultRun(control, figures, request.param, flavors)
    try:
        made.start()
        yield made
    finally:
        made.cloud.retire()


@pytest.mark.parametrize("name", list(FAULTS))
class TestFaults:
    def test_fault(self, run, name, lines, evidence):
        line, found = run.undergo(name, lines, evidence)
        if run.on_rtagent:
            details = "\n".join(f"  {f}" for f in found)
            assert line.clean(), f"{line.text()}\n{details}"
