"""The test cloud as the scenario uses it: the control plane, the hosts,
nova's API, the model of where the servers are, and :meth:`Cloud.agree`,
the check made after every step. Step figures are ``key=value`` lines.
"""

import time

from tests.cloud import novastats
from tests.cloud.api import Nova, PlacementReader
from tests.cloud.checks import HostView, Model, Move, compare
from tests.cloud.control import NOVA_AUDIT_S
from tests.cloud.hosts import AGENT_AUDIT_S, START_BOUND_S, Host
from tests.cloud.services import wait_for

# How long the sources may take to agree after nova says a step is done:
# a bound that catches a hang, not a timing. Normally they agree within
# the agent's prompt sync (about a second after each change), unknown
# consumers reported on the second of two audits, and nova's periodic
# update of the ComputeNode record (its stats compared with nova's own
# Stats, tests/cloud/novastats.py): 2 * AGENT_AUDIT_S + NOVA_AUDIT_S,
# 11 s, and 10-13 s beside make test on 2 cores, where a restarted
# nova-compute also took 27 s to start. How long each step took is
# printed (``agree_s``); speed is the benchmarks' to judge.
BOUND_S = 10 * (2 * AGENT_AUDIT_S + NOVA_AUDIT_S)
ACTION_BOUND_S = 90
POLL_S = 0.5


class Disagreement(AssertionError):
    """After the bound, a source disagrees with the servers' flavors."""


class Cloud:
    def __init__(self, control, hosts, figures):
        self.control = control
        self.hosts = {host.name: host for host in hosts}
        self.figures = figures
        self.nova = Nova(control.api_endpoint, self.services)
        self.placement = PlacementReader(control.placement)
        self.model = Model()
        self.providers = {}

    def services(self):
        found = list(self.control.services)
        for host in self.hosts.values():
            found += host.services
        return found

    def tails(self):
        found = self.control.tails()
        for host in self.hosts.values():
            found += [(s.name, s.tail()) for s in host.services if s.proc or s.timings]
        return found

    def retire(self, bound=60):
        """Take the hosts out of the cloud: their servers deleted while they
        run (deleting a server waiting for a resize's confirmation calls its
        source host), then their processes stopped and their compute
        services forced down and deleted, so that a later test's scheduler
        never picks them. Best effort; what failed is said in the figures."""
        try:
            mine = [s["id"] for s in self.nova.servers() if s["OS-EXT-SRV-ATTR:host"] in self.hosts]
            for server_id in mine:
                self.nova.delete(server_id)
            for server_id in mine:
                self.nova.wait_gone(server_id, bound)
        except Exception as exc:  # reported in the figures; the teardown goes on
            self.figure("retire", error=repr(str(exc).splitlines()[0][:200]))
        for host in self.hosts.values():
            host.stop()
        try:
            for name in self.hosts:
                self.nova.force_down(name, True)
                self.nova.delete_compute_service(name)
        except Exception as exc:  # reported in the figures; the teardown goes on
            self.figure("retire", error=repr(str(exc).splitlines()[0][:200]))

    # -- start-up ---------------------------------------------------------------

    def wait_hosts_ready(self, what="start-up"):
        """Every host's compute service up, its hypervisor in os-hypervisors
        and its provider in Placement; every running agent in sync."""
        t0 = time.monotonic()
        for host in self.hosts.values():
            if host.on_rtagent:
                host.wait_agent_ready()

        def ready():
            if not set(self.hosts) <= self.control.mapped_hosts():
                return False
            services = self.nova.compute_services()
            hypervisors = self.nova.hypervisors()
            for name in self.hosts:
                service = services.get(name)
                if not service or service["state"] != "up" or name not in hypervisors:
                    return False
                provider = self.placement.provider(name)
                if provider is None or not self.placement.inventories(provider):
                    return False
                self.providers[name] = provider
            return True

        wait_for(ready, "the hosts' compute services up", START_BOUND_S, self.services())
        self.figure(what, ready_s=time.monotonic() - t0)

    # -- figures ------------------------------------------------------------------

    def figure(self, step, **values):
        parts = [f"step={step}"]
        for key, value in values.items():
            parts.append(f"{key}={value:.1f}" if isinstance(value, float) else f"{key}={value}")
        self.figures.append("cloud: " + " ".join(parts))

    # -- the check ---------------------------------------------------------------

    def observe(self, command=False):
        """{host: HostView} and server -> its allocations, read now;
        ``command``: the agents' view from ``rtagent status --json``."""
        hypervisors = self.nova.hypervisors()
        views = {}
        for name, host in self.hosts.items():
            provider = self.providers[name]
            agent = None
            if host.agent.running:
                status = host.status_command() if command else host.status()
                agent = ((status or {}).get("nodes") or [None])[0]
                if agent is None:
                    agent = {"resources": {}, "instance_uuids": [], "unanswered": True}
            views[name] = HostView(
                name=name,
                provider=provider,
                usages=self.placement.usages(provider),
                allocations=self.placement.allocations(provider),
                inventories=self.placement.inventories(provider),
                hypervisor=hypervisors.get(name) if host.compute is not None else None,
                agent=agent,
            )
        allocations = {s: self.placement.consumer(s) for s in self.model.servers}
        return views, allocations

    def findings(self, command=False):
        views, allocations = self.observe(command)
        found = []
        for view in views.values():
            found += compare(self.model, view, allocations, self.providers)
        found += self.stats_findings()
        return found, views

    def stats_findings(self):
        """Where a running compute service's ComputeNode record (what
        nova's scheduler reads) differs from what stock nova's own Stats
        computes for the servers nova's rows place on the host."""
        running = [name for name, host in self.hosts.items() if host.compute is not None]
        if not running:
            return []
        records, instances = novastats.read(self.control, running)
        found = []
        for name in running:
            host = self.hosts[name]
            found += novastats.compare(name, records.get(name), instances, host.DRIVER_STATS)
        return found

    def agree(self, step, bound=BOUND_S, sources=None, **figures):
        """Wait until Placement, os-hypervisors and every running agent
        agree with the model (the agents' last word from ``rtagent status
        --json``), within ``bound`` s; record the step's figures.

        :param sources: the sources judged (``Finding.source``), or None
            for all.
        :raises Disagreement: a source disagrees after the bound.
        """
        t0 = time.monotonic()
        deadline = t0 + bound

        def judged(command=False):
            found, views = self.findings(command)
            return [f for f in found if sources is None or f.source in sources], views

        while True:
            for service in self.services():
                service.check()
            found, views = judged()
            if not found:
                found, views = judged(command=True)
                if not found:
                    break
            now = time.monotonic()
            if now >= deadline:
                self._fail(step, found, now - t0)
            time.sleep(POLL_S)
        took = time.monotonic() - t0
        used = {f"{name}_vcpus": views[name].usages.get("VCPU", 0) for name in sorted(self.hosts)}
        self.figure(step, **figures, agree_s=took, servers=len(self.model.servers), **used)
        return took

    def _fail(self, step, found, waited):
        lines = "\n".join(f"  {f}" for f in found)
        message = f"step {step}: after {waited:.1f} s the sources disagree:\n{lines}"
        self.figure(step, agree_s=waited, disagree=len(found))
        raise Disagreement(message)

    # -- steps the scenario takes ---------------------------------------------------

    def boot(self, name, flavor, count=1):
        """Boot ``count`` servers of ``flavor``, wait until ACTIVE; add them to
        the model where nova placed them; return their ids."""
        ids = self.nova.boot(name, flavor.id, count)
        for server_id in ids:
            server = self.nova.wait_server(server_id, "ACTIVE", ACTION_BOUND_S)
            self.model.place(server_id, server["OS-EXT-SRV-ATTR:host"], flavor)
        return ids

    def boot_refused(self, name, flavor):
        """Boot one server that fits nowhere: it must end in ERROR with
        "No valid host"; it is deleted again."""
        (server_id,) = self.nova.boot(name, flavor.id)
        server = self.nova.wait_server(server_id, "ERROR", ACTION_BOUND_S)
        fault = (server.get("fault") or {}).get("message", "")
        assert "No valid host" in fault, server
        assert not self.placement.consumer(server_id), "a refused server holds allocations"
        self.nova.delete(server_id)
        self.nova.wait_gone(server_id, ACTION_BOUND_S)
        return fault

    def delete(self, *server_ids):
        for server_id in server_ids:
            self.nova.delete(server_id)
        for server_id in server_ids:
            self.nova.wait_gone(server_id, ACTION_BOUND_S)
            self.model.remove(server_id)

    def to_verify_resize(self, server_id, action, new_flavor=None):
        """Resize (``new_flavor``) or cold-migrate the server up to
        VERIFY_RESIZE; the model then has the move waiting."""
        source, old = self.model.servers[server_id]
        if action == "resize":
            self.nova.action(server_id, "resize", {"flavorRef": new_flavor.id})
        else:
            self.nova.action(server_id, "migrate")
        server = self.nova.wait_server(server_id, "VERIFY_RESIZE", ACTION_BOUND_S)
        dest = server["OS-EXT-SRV-ATTR:host"]
        assert dest != source, server
        migration = self.nova.migrations(server_id)[0]
        self.model.place(server_id, dest, new_flavor or old)
        self.model.moves[server_id] = Move(migration["uuid"], source, old)
        return dest

    def confirm(self, server_id):
        self.nova.action(server_id, "confirmResize")
        self.nova.wait_migration(server_id, "confirmed", ACTION_BOUND_S)
        self.nova.wait_server(server_id, "ACTIVE", ACTION_BOUND_S)
        self.model.moves.pop(server_id)

    def revert(self, server_id):
        move = self.model.moves[server_id]
        self.nova.action(server_id, "revertResize")
        self.nova.wait_migration(server_id, "reverted", ACTION_BOUND_S)
        server = self.nova.wait_server(server_id, "ACTIVE", ACTION_BOUND_S)
        assert server["OS-EXT-SRV-ATTR:host"] == move.source, server
        self.model.moves.pop(server_id)
        self.model.place(server_id, move.source, move.old)


def start_cloud(control, figures, names, on_rtagent):
    """A :class:`Cloud` of new hosts ``names`` over ``control``, started on
    rtagent (or on stock nova-compute), once they are ready; the hosts are
    retired again if they do not get ready."""
    t0 = time.monotonic()
    cloud = Cloud(control, [Host(name, control, control.workdir) for name in names], figures)
    for host in cloud.hosts.values():
        if on_rtagent:
            host.start_on_rtagent()
        else:
            host.start_on_stock_nova()
    try:
        cloud.wait_hosts_ready("hosts_start")
    except BaseException:
        cloud.retire()
        raise
    cloud.figure("hosts_started", hosts=",".join(names), s=time.monotonic() - t0)
    return cloud
