"""What each host should hold given the servers on it (the scenario's
model), and the comparison of what Placement, nova's os-hypervisors and
each agent's status say with it. Pure: :func:`compare` is given what was
read (:class:`HostView`), it reads nothing.
"""

import dataclasses

from tests.cloud.control import ACCOUNTING

CLASSES = ("VCPU", "PCPU", "MEMORY_MB", "DISK_GB")
RESERVED_MEMORY_MB = int(ACCOUNTING["reserved_host_memory_mb"])
RESERVED_DISK_GB = int(ACCOUNTING["reserved_host_disk_mb"]) // 1024
RESERVED = {"VCPU": 0, "PCPU": 0, "MEMORY_MB": RESERVED_MEMORY_MB, "DISK_GB": RESERVED_DISK_GB}


@dataclasses.dataclass(frozen=True)
class Flavor:
    """A flavor; ``dedicated``: its vCPUs are pinned (``hw:cpu_policy``),
    allocated as PCPU."""

    name: str
    vcpus: int
    ram: int
    disk: int
    id: str = ""
    dedicated: bool = False

    def resources(self):
        cpus = "PCPU" if self.dedicated else "VCPU"
        return {cpus: self.vcpus, "MEMORY_MB": self.ram, "DISK_GB": self.disk}


@dataclasses.dataclass(frozen=True)
class Move:
    """A resize or cold migration waiting for its confirmation: the source
    keeps the old flavor, held by the migration's consumer."""

    migration: str
    source: str
    old: Flavor


class Model:
    """Where the scenario's servers are: server -> (host, flavor); the moves
    waiting in VERIFY_RESIZE; servers evacuated from a host that is still
    down (nova keeps their allocation there until it starts again)."""

    def __init__(self):
        self.servers = {}
        self.moves = {}
        self.evacuated = {}

    def place(self, server, host, flavor):
        self.servers[server] = (host, flavor)

    def remove(self, server):
        self.servers.pop(server, None)
        self.moves.pop(server, None)
        self.evacuated.pop(server, None)

    def host_of(self, server):
        return self.servers[server][0]

    def on(self, host):
        return {s for s, (h, _) in self.servers.items() if h == host}

    def consumers(self, host):
        """consumer -> resources it should hold on ``host``'s provider."""
        found = {s: f.resources() for s, (h, f) in self.servers.items() if h == host}
        for move in self.moves.values():
            if move.source == host:
                found[move.migration] = move.old.resources()
        for server, source in self.evacuated.items():
            if source == host:
                found[server] = self.servers[server][1].resources()
        return found

    def usage(self, host):
        used = dict.fromkeys(CLASSES, 0)
        for resources in self.consumers(host).values():
            for rc, amount in resources.items():
                used[rc] += amount
        return used


@dataclasses.dataclass
class HostView:
    """What was read about one host; ``hypervisor`` and ``agent`` are None
    when that service is not running (nothing to ask)."""

    name: str
    provider: str
    usages: dict
    allocations: dict
    inventories: dict
    hypervisor: dict | None
    agent: dict | None


@dataclasses.dataclass(frozen=True)
class Finding:
    host: str
    source: str
    what: str
    expected: object
    got: object

    def __str__(self):
        return f"{self.host} {self.source} {self.what}: expected {self.expected}, got {self.got}"


def compare(model, view, server_allocations, providers):
    """Findings where ``view`` (a :class:`HostView`) disagrees with
    ``model``. ``server_allocations``: server -> {provider: resources} of
    the servers on this host, as Placement has them; ``providers``: host ->
    its provider."""
    found = []
    host = view.name

    def expect(source, what, expected, got):
        if expected != got:
            found.append(Finding(host, source, what, expected, got))

    usage = model.usage(host)
    expect("placement", "usages", usage, {rc: view.usages.get(rc, 0) for rc in CLASSES})
    expect("placement", "allocations", model.consumers(host), view.allocations)
    # What the host reserves is the configuration's alone: a guest the
    # agent took for an untracked domain would be reserved too.
    reserved = {rc: inv["reserved"] for rc, inv in view.inventories.items()}
    expect("placement", "reserved", {rc: RESERVED.get(rc, 0) for rc in reserved}, reserved)
    for rc, inv in view.inventories.items():
        capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
        if view.usages.get(rc, 0) > capacity:
            found.append(
                Finding(host, "placement", f"{rc} oversubscribed", capacity, view.usages[rc])
            )
    for server in sorted(model.on(host)):
        resources = model.servers[server][1].resources()
        expected = {view.provider: resources}
        if server in model.evacuated:
            expected[providers[model.evacuated[server]]] = resources
        expect("placement", f"allocations of {server}", expected, server_allocations.get(server))
    totals = {rc: inv["total"] for rc, inv in view.inventories.items()}
    if view.hypervisor is not None:
        _hypervisor(model, view, usage, totals, expect)
    if view.agent is not None:
        _agent(model, view, usage, totals, expect)
    return found


def _hypervisor(model, view, usage, totals, expect):
    hv = view.hypervisor
    # nova counts a pinned server's vCPUs as used vCPUs too.
    expect("os-hypervisors", "vcpus_used", usage["VCPU"] + usage["PCPU"], hv["vcpus_used"])
    expect(
        "os-hypervisors",
        "memory_mb_used",
        RESERVED_MEMORY_MB + usage["MEMORY_MB"],
        hv["memory_mb_used"],
    )
    expect(
        "os-hypervisors", "local_gb_used", RESERVED_DISK_GB + usage["DISK_GB"], hv["local_gb_used"]
    )
    # nova counts the servers on the host: a departed one waiting for its
    # confirmation is not (its old flavor is the migration's).
    expect("os-hypervisors", "running_vms", len(model.on(view.name)), hv["running_vms"])
    expect(
        "os-hypervisors",
        "totals",
        {
            "VCPU": totals.get("VCPU"),
            "MEMORY_MB": totals.get("MEMORY_MB"),
            "DISK_GB": totals.get("DISK_GB"),
        },
        {"VCPU": hv["vcpus"], "MEMORY_MB": hv["memory_mb"], "DISK_GB": hv["local_gb"]},
    )


def _agent(model, view, usage, totals, expect):
    node = view.agent
    resources = node["resources"]
    expect("agent", "used", usage, {rc: resources.get(rc, {}).get("used", 0) for rc in CLASSES})
    expect("agent", "totals", totals, {rc: r["total"] for rc, r in resources.items()})
    expect("agent", "instances", sorted(model.on(view.name)), sorted(node["instance_uuids"]))
    unknown = ((node.get("sync") or {}).get("placement") or {}).get("unknown_consumers") or ()
    expect("agent", "unknown consumers", [], sorted(unknown))
