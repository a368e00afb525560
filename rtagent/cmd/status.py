"""``rtagent status``: what the running agent thinks, as a table or JSON.

Asks the agent's loopback health endpoint (``/status``); when that is
switched off, asks over RPC (``get_status``). Never opens the state
directory, which the running agent holds. The table shows every string
escaped where it is not printable; ``--json`` escapes them as JSON does.
"""

import json
import sys
import threading
import urllib.error
import urllib.request

from rtagent.health_server import HOST
from rtagent.rpc.status import printable, printable_tree

TIMEOUT_S = 10.0


def main(conf):
    try:
        report = _from_http(conf) if conf.health.enabled else _from_rpc(conf)
    except (OSError, TimeoutError, RuntimeError) as exc:
        print(f"rtagent: error: cannot reach the running agent: {printable(exc)}", file=sys.stderr)
        return 1
    if conf.command.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(render(report))
    return 0


def _from_http(conf):
    url = f"http://{HOST}:{conf.health.port}/status"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
            return json.load(answer)
    except urllib.error.URLError as exc:
        raise OSError(f"{url}: {exc.reason}") from exc


def _from_rpc(conf):
    from rtagent.rpc import transport
    from rtagent.rpc.client import AgentClient

    rpc = transport.get_transport(conf)
    result = {}

    def ask():
        client = AgentClient(rpc, conf.host, timeout=TIMEOUT_S, retry=1)
        result["reply"] = client.call("get_status")

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(TIMEOUT_S + 5)
    rpc.cleanup()
    if "reply" not in result:
        raise TimeoutError(f"no answer over RPC from {conf.host}")
    reply = result["reply"]
    if not reply["ok"]:
        raise RuntimeError(reply["error"]["message"])
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
    for node in report["nodes"]:
        lines.append("")
        state = "DISABLED (" + node["disabled"] + ")" if node["disabled"] else "enabled"
        lines.append(f"node {node['hypervisor_hostname']}  {node['node_uuid']}  {state}")
        if node.get("unavailable"):
            lines.append(f"  hypervisor unavailable: {node['unavailable']}")
        header = ("class", "total", "reserved", "ratio", "capacity", "used", "free")
        lines.append("  " + "".join(f"{h:>12}" for h in header))
        for rc, r in sorted(node["resources"].items()):
            row = (
                rc,
                r["total"],
                r["reserved"],
                r["allocation_ratio"],
                f"{r['capacity']:g}",
                r["used"],
                f"{r['free']:g}",
            )
            lines.append("  " + "".join(f"{v!s:>12}" for v in row))
        lines.append(f"  instances: {node['instances']}; moves in progress: {len(node['moves'])}")
        for move in node["moves"]:
            lines.append(
                f"    {move['migration_type']} {move['migration_uuid']} of "
                f"{move['instance_uuid']} ({move['status']})"
            )
        drift = node["drift"]
        lines.append(
            f"  drift: {len(drift['untracked_domains'])} domain(s) without a claim, "
            f"{len(drift['missing_instances'])} instance(s) without a domain"
        )
        for dom in drift["untracked_domains"]:
            lines.append(f"    untracked {dom['name']} {dom['uuid']}")
        for inst in drift["missing_instances"]:
            lines.append(f"    missing {inst}")
        sync = node.get("sync") or {}
        if sync.get("in_sync"):
            lines.append(f"  placement: in sync ({sync.get('audits', 0)} audits)")
        else:
            lines.append(f"  placement: NOT in sync: {sync.get('last_error') or 'no audit yet'}")
    return "\n".join(lines)
