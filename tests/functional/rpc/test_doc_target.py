"""docs/rpc-api.md's Target and version reach the agent as written: the
doc's Python snippet runs with oslo.messaging alone (no rtagent import, in a
subprocess), from a process whose control_exchange is oslo.messaging's
default or nova's, against an agent served over a real RabbitMQ with a real
Placement. So does its pinned claim ("Pinned and NUMA guests"), against an
agent on a host with NUMA cells and a ``cpu_dedicated_set``, answering what
the doc shows."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from rtagent.rpc import transport
from rtagent.testing.placement_server import PlacementServer
from tests.functional.rpc.conftest import Served
from tests.functional.rpc.harness import bounded_call, make_conf

pytestmark = pytest.mark.functional

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "rpc-api.md")
HOST = "doc-target-host"
# What the snippet names, and the test replaces with the real values.
DOC_URL = "rabbit://user:secret@broker:5672/"
DOC_SERVER = "compute-1"


def doc_text():
    with open(DOC, encoding="utf-8") as f:
        return f.read()


def doc_snippet():
    """The first Python block of the doc: what a conductor would copy."""
    return re.search(r"```python\n(.*?)\n```", doc_text(), re.S).group(1)


def doc_numa_example():
    """The doc's pinned claim: its Python block (run after the first
    block's set-up) and the result the doc shows for it."""
    text = doc_text()
    section = text[text.index("\n## Pinned and NUMA guests\n") :]
    section = section[: section.index("\n## ", 1)]
    code = re.search(r"```python\n(.*?)\n```", section, re.S).group(1)
    result = json.loads(re.search(r"```json\n(.*?)\n```", section, re.S).group(1))
    return code, result


@pytest.fixture(scope="module")
def served(broker, placement_server, tmp_path_factory):
    agent = Served(
        make_conf(str(tmp_path_factory.mktemp("doc-target")), broker.transport_url, host=HOST),
        placement_server.endpoint,
    )
    yield agent
    agent.stop()


# Runs the snippet as another codebase would: oslo.messaging only, with the
# control_exchange its service sets (nova: "nova"; none: "openstack").
RUNNER = textwrap.dedent(
    """\
    import json, sys, uuid
    import oslo_messaging
    if sys.argv[1] != "-":
        oslo_messaging.set_transport_defaults(control_exchange=sys.argv[1])
    instance_uuid = str(uuid.uuid4())
    exec(compile(sys.stdin.read(), "rpc-api.md", "exec"))
    assert not [m for m in sys.modules if m.split(".")[0] == "rtagent"], "rtagent imported"
    print(json.dumps({"instance_uuid": instance_uuid, "reply": reply}))
    """
)


def run_as_a_conductor(snippet, broker, host, exchange):
    """What the snippet leaves in ``instance_uuid`` and ``reply``."""
    assert DOC_URL in snippet and f'server="{DOC_SERVER}"' in snippet, snippet
    code = snippet.replace(DOC_URL, broker.transport_url).replace(
        f'server="{DOC_SERVER}"', f'server="{host}"'
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, exchange],
        input=code,
        check=False,
        capture_output=True,
        text=True,
        timeout=90,
        cwd="/",  # not the checkout: only what the venv installs is importable
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("exchange", ["-", "nova"], ids=["oslo-default", "nova-process"])
def test_the_doc_snippet_reaches_the_agent_with_oslo_messaging_alone(served, broker, exchange):
    out = run_as_a_conductor(doc_snippet(), broker, HOST, exchange)
    assert out["reply"]["ok"], out
    assert out["reply"]["result"]["instance_uuid"] == out["instance_uuid"]
    held = {i.uuid for i in served.agent.tracker.snapshot().instances}
    assert out["instance_uuid"] in held


def test_the_doc_and_ping_agree_on_the_api_version(served):
    text = doc_text()
    title = re.search(r"^# rtagent RPC API (\d+\.\d+): the contract$", text, re.M).group(1)
    in_target = re.search(r'version="(\d+\.\d+)"', doc_snippet()).group(1)
    in_ping = re.search(r'"api_version": "(\d+\.\d+)"', text).group(1)
    latest = re.findall(r"^(\d+\.\d+) added ", text, re.M)[-1]
    reply = bounded_call(served.client(timeout=20), 25, "ping")
    assert reply["ok"], reply
    served_version = reply["result"]["api_version"]
    assert served_version == transport.API_VERSION
    assert {title, in_target, in_ping, latest} == {served_version}


NUMA_HOST = "doc-numa-host"


@pytest.fixture(scope="module")
def served_numa(broker, tmp_path_factory):
    """The libvirt test driver's own host (two NUMA cells; CPUs 0, 2 and 4
    online, all on cell 0) with the doc's ``cpu_dedicated_set``, on a
    Placement of its own: both test driver hosts take the machine's
    hostname, which names one provider in a Placement."""
    with PlacementServer(db_sync=False) as placement:
        agent = Served(
            make_conf(
                str(tmp_path_factory.mktemp("doc-numa")),
                broker.transport_url,
                host=NUMA_HOST,
                libvirt__connection_uri="test:///default",
                compute__cpu_dedicated_set="2,4",
                compute__cpu_shared_set="0",
                reserved_host_memory_mb=0,
                # The driver's own running domain would take 2 of its 3 GiB.
                rtagent__count_untracked_domains=False,
            ),
            placement.endpoint,
        )
        yield agent
        agent.stop()


@pytest.mark.parametrize("exchange", ["-", "nova"], ids=["oslo-default", "nova-process"])
def test_the_doc_pinned_claim_answers_what_the_doc_shows(served_numa, broker, exchange):
    code, shown = doc_numa_example()
    setup = doc_snippet()
    setup = setup[: setup.index("\nreply = ")]  # the transport and client only
    out = run_as_a_conductor(f"{setup}\n{code}", broker, NUMA_HOST, exchange)
    instance = out["instance_uuid"]
    tracker = served_numa.agent.tracker
    try:
        assert out["reply"]["ok"], out
        expected = {**shown, "instance_uuid": instance, "node_uuid": tracker.node_uuid}
        got = dict(out["reply"]["result"])
        # The node's view the doc leaves out (since 1.9): this node's, with
        # the claim counted in it.
        view = got.pop("compute_node")
        assert got == expected
        assert view["uuid"] == tracker.node_uuid
        now = tracker.compute_node_view(view["host_ip"])
        assert view == {**now, "updated_at": view["updated_at"]}
        held = {i.uuid: i for i in tracker.snapshot().instances}
        assert held[instance].numa.pinned == {2, 4}
    finally:
        # Both dedicated CPUs are taken: free them for the other exchange.
        tracker.abort_instance_claim(instance)
