"""A host of the faults cloud: the test cloud's host (tests/cloud/hosts.py)
with a gates directory for its compute services' virt driver, and room for
a burst of boots (vCPUs at ratio :data:`CPU_RATIO`, in rtagent.conf as in
nova.conf; IoOpsFilter's limit raised in :data:`NOVA_OPTIONS`)."""

import os

from tests.cloud.hosts import Host
from tests.cloud.virt import GATES_ENV
from tests.faults.gates import Gates

CPU_RATIO = "4.0"
# Every nova service's nova.conf: the ratio above; IoOpsFilter lets a
# host build the burst's servers at once; the tracker link's DEBUG line
# of each call to the agent (the evidence of a claim in flight).
NOVA_OPTIONS = {
    "DEFAULT": {
        "cpu_allocation_ratio": CPU_RATIO,
        "default_log_levels": "rtagent.nova.link=DEBUG",
    },
    "filter_scheduler": {"max_io_ops_per_host": "16"},
}


class FaultHost(Host):
    def __init__(self, name, control, workdir):
        super().__init__(name, control, workdir)
        self.gates = Gates(os.path.join(self.dir, "gates"))
        for service in (self.rtagent_compute, self.stock_compute):
            service.env = {**service.env, GATES_ENV: self.gates.dir}

    def _agent_sections(self):
        sections = super()._agent_sections()
        sections["DEFAULT"]["cpu_allocation_ratio"] = CPU_RATIO
        return sections

    @property
    def tracker(self):
        """The process that keeps the host's books: ``rtagent run``, or
        stock nova-compute (its tracker lives in it)."""
        return self.agent if self.on_rtagent else self.stock_compute

    @property
    def compute_service(self):
        """The host's compute service, running or not."""
        return self.rtagent_compute if self.on_rtagent else self.stock_compute
