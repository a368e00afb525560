"""After a fault: how the cloud's books stand once its pieces are back.

- every server reaches a final state (ACTIVE, SHUTOFF, VERIFY_RESIZE or
  ERROR, no task) within :data:`SETTLE_BOUND_S` of the recovery; the
  others are ``stuck``;
- the user's and the operator's next steps (docs/faults.md): a resize
  waiting in VERIFY_RESIZE is confirmed, a server in ERROR is deleted;
- then, within :data:`AGREE_BOUND_S`, make test-cloud's agreement holds
  for the servers nova has (Placement usages and allocations,
  os-hypervisors, every agent's ``rtagent status``, the ComputeNode
  records); ``converged_s`` counts from the recovery;
- ``leaked``: consumers on the hosts' providers that no server explains,
  then whatever the hosts' providers still hold once every server is
  deleted (:data:`GONE_BOUND_S`); ``double``: servers with allocations on
  two providers, or held by two agents.
"""

import dataclasses
import os
import subprocess
import time

from tests.cloud.checks import Model
from tests.cloud.control import BIN, service_env

FINAL = frozenset({"ACTIVE", "SHUTOFF", "VERIFY_RESIZE", "ERROR"})
SETTLE_BOUND_S = 150
AGREE_BOUND_S = 60
GONE_BOUND_S = 30
POLL_S = 1.0


@dataclasses.dataclass
class Line:
    """One fault's figures for one tracker."""

    fault: str
    tracker: str
    converged_s: float | None = None
    leaked: int = 0
    stuck: int = 0
    double: int = 0
    disagree: int = 0
    actions: list = dataclasses.field(default_factory=list)

    def clean(self):
        return (
            self.converged_s is not None
            and not self.leaked
            and not self.stuck
            and not self.double
            and not self.disagree
        )

    def text(self):
        converged = "never" if self.converged_s is None else f"{self.converged_s:.1f}"
        return (
            f"fault={self.fault} tracker={self.tracker} converged_s={converged} "
            f"leaked_allocations={self.leaked} stuck_servers={self.stuck} "
            f"double_counted={self.double} disagree={self.disagree} "
            f"clean={'yes' if self.clean() else 'no'} "
            f"operator_actions={','.join(self.actions) or 'none'}"
        )


def summary(lines):
    counts = {}
    for line in lines:
        done, total = counts.get(line.tracker, (0, 0))
        counts[line.tracker] = (done + line.clean(), total + 1)
    return " ".join(
        f"faults_{tracker}_clean={done}/{total}"
        for tracker, (done, total) in sorted(counts.items(), key=lambda kv: kv[0] != "rtagent")
    )


def settle(cloud, line, bound=SETTLE_BOUND_S):
    """Wait until every server is in a final state; count those that are
    not after ``bound`` s. :returns: the servers as nova shows them."""
    deadline = time.monotonic() + bound
    while True:
        servers = cloud.nova.servers()
        stuck = [s for s in servers if not _final(cloud, s)]
        if not stuck or time.monotonic() >= deadline:
            line.stuck = len(stuck)
            return servers
        time.sleep(POLL_S)


def _final(cloud, server):
    """A final state, and no task. A VERIFY_RESIZE is final only while its
    migration is ``finished`` (waiting for the user, the one status nova's
    API confirms from). nova shows VERIFY_RESIZE, with no task, through a
    whole confirmation: the migration ``confirming``, then ``confirmed``
    (the source's tracker sets it as it drops the move's claim) before the
    instance is saved ACTIVE; confirmed in that window, nova answers
    "Instance has not been resized" (postgres_restart_confirm did)."""
    if server["status"] not in FINAL or server["OS-EXT-STS:task_state"]:
        return False
    if server["status"] != "VERIFY_RESIZE":
        return True
    latest = cloud.nova.migrations(server["id"])[:1]
    return not latest or latest[0]["status"] == "finished"


def next_steps(cloud, line, servers, bound=90):
    """A resize waiting for confirmation confirmed (the user's next step);
    a server in ERROR deleted (the operator's: docs/faults.md)."""
    for server in servers:
        if server["status"] == "VERIFY_RESIZE":
            cloud.nova.action(server["id"], "confirmResize")
            cloud.nova.wait_migration(server["id"], "confirmed", bound)
            cloud.nova.wait_server(server["id"], "ACTIVE", bound)
            line.actions.append("confirm_resize")
        elif server["status"] == "ERROR":
            cloud.nova.delete(server["id"])
            cloud.nova.wait_gone(server["id"], bound)
            line.actions.append("delete_error_server")


def remodel(cloud, flavors):
    """The scenario's model made from what nova says now: each server on
    its host with its flavor."""
    model = Model()
    for server in cloud.nova.servers():
        flavor = flavors[server["flavor"]["original_name"]]
        model.place(server["id"], server["OS-EXT-SRV-ATTR:host"], flavor)
    cloud.model = model


def books(cloud):
    """``(leaked, double)`` read now: consumers on the hosts' providers
    that no server explains; servers allocated on two providers or held
    by two agents."""
    views, allocations = cloud.observe()
    leaked = set()
    for name, view in views.items():
        leaked |= set(view.allocations) - set(cloud.model.consumers(name))
    double = {s for s, providers in allocations.items() if len(providers) > 1}
    holders = {}
    for view in views.values():
        for uuid in (view.agent or {}).get("instance_uuids") or ():
            holders[uuid] = holders.get(uuid, 0) + 1
    double |= {uuid for uuid, n in holders.items() if n > 1}
    return len(leaked), len(double)


def converge(cloud, line, recovered_at, bound=AGREE_BOUND_S):
    """Wait for the agreement; fill ``converged_s`` (None if it never
    came), ``disagree``, ``leaked`` and ``double``. :returns: the last
    findings."""
    deadline = time.monotonic() + bound
    while True:
        found, _views = cloud.findings()
        if not found:
            found, _views = cloud.findings(command=True)
        line.leaked, line.double = books(cloud)
        if not found:
            line.converged_s = time.monotonic() - recovered_at
            line.disagree = 0
            return []
        if time.monotonic() >= deadline:
            line.disagree = len(found)
            return found
        time.sleep(POLL_S)


def empty_hosts(cloud, line, control, bound=GONE_BOUND_S):
    """Delete every server; what the hosts' providers still hold after
    ``bound`` s is leaked. nova's audit (``nova-manage placement audit
    --delete``, the operator's tool for orphaned allocations) then clears
    it, so that the next fault starts clean."""
    servers = cloud.nova.servers()
    for server in servers:
        cloud.nova.delete(server["id"])
    for server in servers:
        cloud.nova.wait_gone(server["id"], 120)
    cloud.model = Model()
    deadline = time.monotonic() + bound
    while True:
        held = held_allocations(cloud)
        if not held or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    line.leaked = max(line.leaked, len(held))
    if held:
        line.actions.append("nova_manage_placement_audit_delete")
        audit(control)
    return held


def held_allocations(cloud):
    """consumer -> provider of every allocation on the hosts' providers."""
    found = {}
    for name, provider in cloud.providers.items():
        for consumer in cloud.placement.allocations(provider):
            found[consumer] = name
    return found


def audit(control):
    """``nova-manage placement audit --delete`` as an operator runs it;
    its output, kept in the logs."""
    log = os.path.join(control.logdir, "nova-manage-placement-audit.log")
    with open(log, "ab") as out:
        subprocess.run(
            [
                os.path.join(BIN, "nova-manage"),
                "--config-file",
                control.nova_conf,
                "placement",
                "audit",
                "--delete",
                "--verbose",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=service_env(),
            timeout=180,
            check=False,
        )
