"""Text from the configuration reaches a running agent's log lines and its
RPC error replies escaped, as status shows it: one line each, no raw
newline, ESC or bidirectional control (docs/rpc-api.md, "Errors";
docs/operations.md, "Logs").

A real ``rtagent run`` (a subprocess logging as oslo.log sets it up), a
real RabbitMQ and a real Placement. Three ways in, none through an RPC
argument (the schemas refuse controls there): ``[pci] alias`` names, which
an unknown alias's refusal lists; a line of the file that runs on into the
value above it (``state_path``, in the start-up line); and an option name,
in the unknown-name warning.
"""

import signal
import subprocess
import uuid

import pytest

from rtagent.excerpt import escaped
from rtagent.rpc.client import AgentClient
from rtagent.rpc.transport import get_transport
from rtagent.testing.placement_server import PlacementServer
from tests.functional.rpc.harness import DEMO_URI, bounded_call, make_conf
from tests.functional.rpc.test_status_contract import RTAGENT, wait_for

pytestmark = pytest.mark.functional

HOST = "escape-host"
# "my_ip = ..." indented by mistake: oslo.config reads it as the second line
# of the value above it.
RUN_ON = "\n  my_ip = 192.0.2.1"
RUN_ON_SHOWN = "\\nmy_ip = 192.0.2.1"
FORGED = "1 ERROR rtagent.rpc.endpoint [-] forged"  # no "," or ":" (refused in a name)
# As the file has them: JSON escapes, which the alias reader decodes.
ALIASES = (
    '{"name": "nic\\u202egnp.exe", "vendor_id": "8086", "product_id": "154c"}',
    f'{{"name": "gpu\\n{FORGED}", "vendor_id": "10de", "product_id": "1eb8"}}',
)
KNOWN_SHOWN = f"gpu\\n{FORGED}, nic\\u202egnp.exe"
UNKNOWN_OPTION = "numa\u202e_policy"  # raw in the file


@pytest.fixture
def agent_log(broker, tmp_path):
    """``rtagent run`` on the hostile configuration, and a client; yields
    (client, a callable that stops the agent and returns its log)."""
    (tmp_path / "instances").mkdir()
    conf_path = tmp_path / "rtagent.conf"
    aliases = "\n".join(f"alias = {a}" for a in ALIASES)
    with PlacementServer(db_sync=False) as placement:
        conf_path.write_text(
            f"""[DEFAULT]
host = {HOST}
state_path = {tmp_path}/state{RUN_ON}
transport_url = {broker.transport_url}
[libvirt]
connection_uri = {DEMO_URI}
instances_path = {tmp_path}/instances
[placement]
auth_type = admin_token
endpoint = {placement.endpoint}
token = admin
[rtagent]
audit_interval = 1
[daemon]
startup_delay = 0
notifications = false
[health]
enabled = false
[pci]
{aliases}
{UNKNOWN_OPTION} = legacy
""",
            encoding="utf-8",
        )
        log_path = tmp_path / "agent.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [RTAGENT, "--config-file", str(conf_path), "run"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        transport = get_transport(make_conf(str(tmp_path / "client"), broker.transport_url))

        def stopped():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)
            return log_path.read_text(encoding="utf-8", errors="surrogateescape")

        try:
            yield AgentClient(transport, HOST, timeout=10), stopped
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
            transport.cleanup()


def claim_by_unknown_alias(client):
    return bounded_call(
        client,
        15,
        "instance_claim",
        instance_uuid=str(uuid.uuid4()),
        flavor={"vcpus": 1, "memory_mb": 256},
        pci_requests=[{"alias": "nope", "count": 1}],
    )


def test_alias_names_reach_the_reply_and_the_log_escaped(agent_log, tmp_path):
    client, stopped = agent_log
    reply = wait_for(
        lambda: (r := claim_by_unknown_alias(client)) and not r["error"]["retriable"] and r,
        90,
        "a refusal that is not the agent starting",
    )
    assert reply["error"]["code"] == "pci.invalid_request", reply
    assert reply["error"]["message"] == (
        "PCI request: pci_requests.0.alias: unknown alias 'nope' "
        f"(the node's [pci] alias: {KNOWN_SHOWN})"
    )

    log = stopped()
    lines = log.splitlines()
    # The refusal, as the endpoint logs it; the start-up line; the warning.
    assert any(
        line.endswith(
            f"RPC instance_claim refused (pci.invalid_request): {reply['error']['message']}"
        )
        for line in lines
    ), log
    assert any(f"; state_path {tmp_path}/state{RUN_ON_SHOWN}; node " in line for line in lines), log
    assert any("[pci] numa\\u202e_policy: unknown option" in line for line in lines), log
    # Nothing raw anywhere: no line starts with the text run on.
    assert not [line for line in log.split("\n") if escaped(line) != line], log
    assert not [line for line in lines if line.startswith(("my_ip", FORGED))], log
