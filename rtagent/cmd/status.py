"""``rtagent status``: what the running agent thinks, as a table or JSON.

Asks the agent's loopback health endpoint (``/status``); when that is
switched off, asks over RPC (``get_status``). Never opens the state
directory, which the running agent holds. The table shows every string
escaped where it is not printable; ``--json`` escapes them as JSON does.

Exit status: 0 with the report; 1 and one line when the agent does not
answer (within :data:`TIMEOUT_S`); 2 when the configuration gives no way
to ask it.
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request

from rtagent.pci import model as pci_model
from rtagent.rpc.status import printable, printable_tree
from rtagent.service.health import HOST

# /status is built from published snapshots and never waits for a lock:
# an agent that has not answered in this long is not going to.
TIMEOUT_S = 5.0
EXIT_DOWN = 1
EXIT_CONFIG = 2


class AgentDown(Exception):
    """The agent did not answer; the message says how it was asked."""


def main(conf):
    if not conf.health.enabled and not conf.transport_url:
        print(
            "rtagent: error: [health] enabled = false and no [DEFAULT] transport_url: "
            "status has no way to ask the agent",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    try:
        report = _from_http(conf) if conf.health.enabled else _from_rpc(conf)
    except AgentDown as exc:
        print(f"rtagent: error: {printable(exc)}", file=sys.stderr)
        return EXIT_DOWN
    if conf.command.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(render(report))
    return 0


def status_url(conf):
    """Where the agent serves /status: its ``[health] bind_address``, or
    127.0.0.1 when it listens on every address."""
    bound = conf.health.bind_address if "bind_address" in conf.health else HOST
    if bound in ("", "0.0.0.0", "::"):  # noqa: S104 - a comparison, not a bind
        bound = HOST
    host = f"[{bound}]" if ":" in bound else bound
    return f"http://{host}:{conf.health.port}/status"


def _from_http(conf):
    url = status_url(conf)
    try:
        # Always http:, built by status_url.
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:  # noqa: S310
            return json.load(answer)
    except urllib.error.HTTPError as exc:
        raise AgentDown(
            f"{url} answered {exc.code} {exc.reason}: is rtagent on that port?"
        ) from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            raise AgentDown(
                f"rtagent is not running: nothing listens on {url} "
                "(systemctl status rtagent; journalctl -u rtagent)"
            ) from exc
        if isinstance(reason, TimeoutError):
            raise AgentDown(_no_answer(url)) from exc
        raise AgentDown(f"no answer from {url}: {reason}") from exc
    except TimeoutError as exc:
        raise AgentDown(_no_answer(url)) from exc
    except (OSError, ValueError) as exc:
        raise AgentDown(f"no usable answer from {url}: {exc}") from exc


def _no_answer(url):
    return f"no answer from {url} within {TIMEOUT_S:g} s: is rtagent hung? (journalctl -u rtagent)"


def _from_rpc(conf):
    from rtagent.rpc import transport
    from rtagent.rpc.client import AgentClient

    rpc = transport.get_transport(conf)
    result = {}

    def ask():
        try:
            client = AgentClient(rpc, conf.host, timeout=TIMEOUT_S, retry=1)
            result["reply"] = client.call("get_status")
        except Exception as exc:  # reported below, in one line
            result["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    # The call's own timeout covers a reachable broker; this one a broker
    # that does not answer (the client would retry the connection).
    worker.join(TIMEOUT_S + 1)
    if "reply" not in result:
        # No cleanup: a transport stuck connecting could hold the exit.
        raise AgentDown(
            f"no answer over RPC from rtagent on host {conf.host} within {TIMEOUT_S:g} s "
            f"({result.get('error', 'no reply')}): is it running, and is the message broker up?"
        )
    rpc.cleanup()
    reply = result["reply"]
    if not reply["ok"]:
        raise AgentDown(f"the agent refused get_status: {reply['error']['message']}")
    return {"host": conf.host, "nodes": [reply["result"]]}


def render(report):
    """The status report as readable text.

    Every string in it is shown :func:`printable`: names and reasons come
    from callers and hypervisors, and a control or bidirectional character
    must not reach the terminal (escape sequences, lines that are not ours,
    text shown reversed).
    """
    report = printable_tree(report)
    lines = [f"host {report['host']}"]
    lines.extend(_health_lines(report))
    for node in report["nodes"]:
        lines.append("")
        state = "DISABLED (" + node["disabled"] + ")" if node["disabled"] else "enabled"
        lines.append(f"node {node['hypervisor_hostname']}  {node['node_uuid']}  {state}")
        if node.get("unavailable"):
            lines.append(f"  hypervisor unavailable: {node['unavailable']}")
        header = ("class", "total", "reserved", "ratio", "capacity", "used", "free", "claimable")
        lines.append("  " + "".join(f"{h:>12}" for h in header) + f"{'in Placement':>14}")
        for rc, r in sorted(node["resources"].items()):
            # An agent from before these were added answers without them.
            claims = r.get("claims") or {}
            placement = r.get("placement") or {}
            row = (
                rc,
                r["total"],
                r["reserved"],
                r["allocation_ratio"],
                f"{r['capacity']:g}",
                r["used"],
                f"{r['free']:g}",
                _number(claims.get("free")),
            )
            lines.append(
                "  "
                + "".join(f"{v!s:>12}" for v in row)
                + f"{_number(placement.get('capacity')):>14}"
            )
        lines.append(f"  instances: {node['instances']}; moves in progress: {len(node['moves'])}")
        for move in node["moves"]:
            lines.append(
                f"    {move['migration_type']} {move['migration_uuid']} of "
                f"{move['instance_uuid']} ({move['status']})"
            )
        drift = node["drift"]
        held = drift.get("pci_devices_held") or []
        lines.append(
            f"  drift: {len(drift['untracked_domains'])} domain(s) without a claim, "
            f"{len(drift['missing_instances'])} instance(s) without a domain"
            + (f", {len(held)} PCI device(s) held without a claim" if held else "")
        )
        for dom in drift["untracked_domains"]:
            lines.append(f"    untracked {dom['name']} {dom['uuid']}")
        for inst in drift["missing_instances"]:
            lines.append(f"    missing {inst}")
        lines.extend(_pool_lines(node.get("disk_pool")))
        lines.extend(_numa_lines(node.get("numa")))
        lines.extend(_pci_lines(node.get("pci"), held))
        lines.extend(_sync_lines(node, node.get("generated_at") or time.time()))
    return "\n".join(lines)


def _number(value):
    return "-" if value is None else f"{value:g}"


def _pool_lines(pool):
    """The guests' disk pool: where DISK_GB comes from, and whether the
    figures are the cluster's now or the last ones it gave."""
    if not pool:
        return []
    where = (
        f"shared provider {pool['provider_uuid']}"
        if pool["shared"]
        else "each host's root (nova's way)"
    )
    lines = [
        f"  disk pool: RBD {pool['pool']}, DISK_GB on {where}: {pool['total_gb']} GiB, "
        f"{pool['used_gb']} GiB stored"
        + (f", {pool['others_gb']} GiB allocated by other hosts" if pool.get("others_gb") else "")
    ]
    if pool["stale"]:
        lines.append(
            f"    STALE since {_local_time(pool['stale_since'])}: {pool['error']}; "
            "the last figures stay in force and nothing is written for the pool"
        )
    lines.append(
        f"    instance disks in the pool: {pool['instance_disks_here']} of this node's "
        f"instances, {pool['instance_disks_elsewhere']} of others; "
        f"{pool['other_images']} other image(s)"
    )
    return lines


def _numa_lines(numa):
    if not numa:
        return []
    lines = []
    for cell in numa["cells"]:
        pages = ", ".join(
            f"{p['size_kb']} KiB pages {p['used']}/{p['total']} used"
            + (f" ({p['reserved']} reserved)" if p["reserved"] else "")
            for p in cell["huge_pages"]
            if p["total"]
        )
        lines.append(
            f"  NUMA cell {cell['id']}: {len(cell['pinned'])}/{len(cell['dedicated_cpus'])} "
            f"dedicated CPU(s) pinned, {cell['memory_used_mb']}/{cell['memory_mb']} MiB used"
            + (f", {pages}" if pages else "")
        )
        for cpu, owner in cell["pinned"].items():
            lines.append(f"    CPU {cpu}: {owner}")
    for consumer, cpus in numa["lost_cpus"].items():
        listed = ",".join(str(c) for c in cpus)
        lines.append(f"  NUMA: {consumer} keeps CPU(s) {listed}, no longer dedicated CPUs")
    # Absent from an agent older than this field.
    for domain, cpus in numa.get("unclaimed_cpus", {}).items():
        listed = ",".join(str(c) for c in cpus)
        lines.append(
            f"  NUMA: domain {domain} is pinned to dedicated CPU(s) {listed} that no claim "
            "keeps; no claim gets them"
        )
    return lines


def _pci_lines(pci, held):
    """The tracked PCI devices: free ones per pool, those claims hold
    (with their owner instance), and those a domain holds without a claim.
    Nothing from an agent older than the field."""
    if pci is None:
        return []
    if not pci["devices"]:
        return ["  PCI devices: none matched by [pci] device_spec"]
    free = sum(p["count"] for p in pci["pools"])
    claimed = pci.get("claimed") or ()
    lines = [
        f"  PCI devices: {pci['devices']} tracked, {free} free in {len(pci['pools'])} pool(s)"
        + (f", {len(claimed)} held by claims" if claimed else "")
    ]
    for pool in pci["pools"]:
        tags = dict(pool["tags"])
        dev_type, address = tags.pop("dev_type", "?"), tags.pop("address", "?")
        if tags.get("remote_managed") == "false":
            del tags["remote_managed"]  # every PF and VF pool says so
        where = f"of PF {address}" if dev_type in pci_model.CHILD_TYPES else f"at {address}"
        node = pool["numa_node"]
        lines.append(
            f"    {pool['vendor_id']}:{pool['product_id']} {dev_type} {where}, "
            + (f"NUMA node {node}" if node is not None else "no NUMA node")
            + f": {pool['count']} free"
            + "".join(f" {k}={v}" for k, v in sorted(tags.items()))
        )
    for c in claimed:
        lines.append(
            f"    {c['address']} {c['status']} by instance {c['owner']} (request {c['request_id']})"
            + (": gone from the host, freed when the claim ends" if c["gone"] else "")
        )
    for h in held:
        lines.append(
            f"    {h['address']} held by domain {h['domain']} {h['owner']} without a claim"
        )
    return lines


def _health_lines(report):
    lines = []
    if "healthy" in report:
        problems = report.get("problems") or []
        lines.append(
            "  health: ok" if report["healthy"] else f"  health: UNHEALTHY: {'; '.join(problems)}"
        )
    rpc = report.get("rpc")
    if rpc:
        if not rpc.get("enabled", True):
            lines.append("  rpc: off (no [DEFAULT] transport_url)")
        elif rpc.get("running"):
            lines.append("  rpc: serving")
        else:
            retry = rpc.get("retry_in")
            lines.append(
                f"  rpc: NOT serving ({rpc.get('attempts', 0)} attempt(s)"
                + (f", next in {_duration(retry)}" if retry is not None else "")
                + f"): {rpc.get('last_error') or 'connecting to the message broker'}"
            )
    return lines


def _sync_lines(node, now):
    """Placement sync state: whether in sync, when it last synced (how long
    ago, and the local time), the last error, unknown consumers."""
    sync = node.get("sync") or {}
    last = sync.get("last_success")
    when = "never" if last is None else f"{_duration(now - last)} ago ({_local_time(last)})"
    audits = sync.get("audits", 0)
    if sync.get("in_sync"):
        lines = [f"  placement: in sync; last sync {when}; {audits} audit(s)"]
    else:
        why = sync.get("last_error") or (
            "overdue" if sync.get("overdue") else "no sync yet" if last is None else "not synced"
        )
        lines = [f"  placement: NOT in sync: {why}", f"    last sync {when}; {audits} audit(s)"]
    # The node's own list when the agent gives it, else the count per node.
    unknown = (sync.get("placement") or {}).get("unknown_consumers")
    if unknown is not None:
        count = len(unknown)
    else:
        count, unknown = (sync.get("unknown_consumers") or {}).get(node["node_uuid"], 0), []
    if count:
        lines.append(
            f"  unknown consumers: {count} (allocations on this node that no claim "
            "accounts for; reported, never deleted)"
        )
        lines.extend(f"    unknown {consumer}" for consumer in unknown[:_SHOWN])
        if len(unknown) > _SHOWN:
            lines.append(f"    ... and {len(unknown) - _SHOWN} more (--json lists them all)")
    else:
        lines.append("  unknown consumers: none")
    due = (sync.get("placement") or {}).get("next_placement_read")
    if due is not None:
        lines.append(
            "  next read of Placement (for changes made by others): "
            + (f"in {_duration(due - now)}" if due > now else "at the next audit")
        )
    backlog = (sync.get("healing_backlog") or {}).get(node["node_uuid"])
    if backlog:
        lines.append(f"  healing backlog: {backlog} released consumer(s) left for the next audit")
    return lines


_SHOWN = 10


def _duration(seconds):
    """``seconds`` for a person: ``4 s``, ``3 min 20 s``, ``2 h 5 min``, ``3 d 4 h``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _local_time(wall):
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(wall))
