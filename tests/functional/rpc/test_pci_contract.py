"""docs/rpc-api.md, "PCI devices" (API 1.4), against an agent served over a
real RabbitMQ with a real Placement, called by a conductor that does not
import rtagent (oslo.messaging alone, in a subprocess): ``pci_requests`` by
alias and by spec reach the tracker through ``instance_claim`` and
``start_move``, the replies and ``get_instance`` name the devices chosen,
refusals are ``pci.invalid_request`` (naming the field) or
``pci.devices_unavailable`` (with its reason) and change nothing, frees give
the devices back, ``get_status`` names each held device's owner. The doc's
own example runs as written and answers what the doc shows.

The host is the libvirt test driver's SR-IOV host
(tests/fixtures/libvirt/test-driver-sriov-host.xml: an X710 PF 0000:3b:00.0
with 4 VFs on NUMA node 0, a Tesla T4 on node 1).
"""

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtagent.pci.requests import derived_id
from rtagent.rpc.endpoint import validate
from rtagent.testing.placement_server import PlacementServer
from tests.functional.rpc.conftest import Served
from tests.functional.rpc.harness import make_conf
from tests.functional.rpc.test_doc_target import doc_snippet, doc_text, run_as_a_conductor
from tests.functional.test_pci_tracking import GPU, HOST_XML, PF, VFS

pytestmark = pytest.mark.functional

HOST = "pci-contract-host"
NIC_SPEC = '{"devname": "ens1f0", "physical_network": "physnet1"}'
GPU_SPEC = '{"vendor_id": "10de", "product_id": "1eb8"}'
# The doc's alias, and one for the whole PF.
NIC_ALIAS = '{"name": "nic", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"}'
PF_ALIAS = '{"name": "pf", "vendor_id": "8086", "product_id": "1572", "device_type": "type-PF"}'
OTHER_NODE = "20000000-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def served(broker, tmp_path_factory):
    """The SR-IOV host with the doc's alias, on a Placement of its own (a
    test-driver host takes the machine's hostname, which names one
    provider in a Placement)."""
    with PlacementServer(db_sync=False) as placement:
        agent = Served(
            make_conf(
                str(tmp_path_factory.mktemp("pci-contract")),
                broker.transport_url,
                host=HOST,
                libvirt__connection_uri=f"test://{HOST_XML}",
                pci__device_spec=[NIC_SPEC, GPU_SPEC],
                pci__alias=[NIC_ALIAS, PF_ALIAS],
                reserved_host_memory_mb=0,
            ),
            placement.endpoint,
        )
        yield agent
        agent.stop()


# Calls the agent as another codebase would: oslo.messaging only. Reads
# {"url", "server", "calls": [[method, args], ...]}, prints the replies.
CONDUCTOR = textwrap.dedent(
    """\
    import json, sys
    import oslo_messaging
    from oslo_config import cfg
    job = json.loads(sys.stdin.read())
    transport = oslo_messaging.get_rpc_transport(cfg.CONF, url=job["url"])
    target = oslo_messaging.Target(
        exchange="rtagent", topic="rtagent", server=job["server"],
        version=job.get("version", "1.4"))
    client = oslo_messaging.get_rpc_client(transport, target, timeout=30)
    replies = [client.call({}, method, **args) for method, args in job["calls"]]
    transport.cleanup()
    assert not [m for m in sys.modules if m.split(".")[0] == "rtagent"], "rtagent imported"
    print(json.dumps(replies))
    """
)


def conduct(broker, *calls, server=HOST, version="1.4"):
    """The replies to ``calls`` ((method, args) pairs), made in order by a
    process that has only oslo.messaging, pinned to ``version``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", CONDUCTOR],
        input=json.dumps(
            {"url": broker.transport_url, "server": server, "calls": calls, "version": version}
        ),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",  # not the checkout: only what the venv installs is importable
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def new_uuid():
    return str(uuid.uuid4())


def result(reply):
    """A reply's result, less the node's view that claims and moves carry
    since 1.9 (tests/integration/test_rpc.py checks it)."""
    assert reply["ok"], reply
    got = reply["result"]
    return {k: v for k, v in got.items() if k != "compute_node"} if isinstance(got, dict) else got


def device(address, dev_type, product, numa_node, request_id, vendor="8086"):
    return {
        "address": address,
        "dev_type": dev_type,
        "vendor_id": vendor,
        "product_id": product,
        "numa_node": numa_node,
        "request_id": request_id,
    }


def vf(index, request_id):
    return device(VFS[index], "type-VF", "154c", 0, request_id)


def claim(instance, *requests, **extra):
    return (
        "instance_claim",
        {
            "instance_uuid": instance,
            "flavor": {"vcpus": 1, "memory_mb": 256},
            "pci_requests": list(requests),
            **extra,
        },
    )


def held(served):
    return {
        d.address: d.instance_uuid for d in served.agent.tracker.snapshot().pci_devices if d.held
    }


def doc_pci_example():
    text = doc_text()
    section = text[text.index("\n## PCI devices\n") :]
    section = section[: section.index("\n## ", 1)]
    code = re.search(r"```python\n(.*?)\n```", section, re.S).group(1)
    shown = json.loads(re.search(r"```json\n(.*?)\n```", section, re.S).group(1))
    return code, shown


def test_the_doc_pci_claim_answers_what_the_doc_shows(served, broker):
    code, shown = doc_pci_example()
    setup = doc_snippet()
    setup = setup[: setup.index("\nreply = ")]  # the transport and client only
    out = run_as_a_conductor(f"{setup}\n{code}", broker, HOST, "-")
    instance = out["instance_uuid"]
    tracker = served.agent.tracker
    try:
        expected = {**shown, "instance_uuid": instance, "node_uuid": tracker.node_uuid}
        assert out["reply"]["ok"], out
        got = dict(out["reply"]["result"])
        # The node's view the doc leaves out (since 1.9), as the node shows
        # it with the claim's two VFs held.
        view = got.pop("compute_node")
        assert got == expected
        assert view["uuid"] == tracker.node_uuid
        assert view["pci_device_pools"] == tracker.compute_node_view("x")["pci_device_pools"]
        assert held(served) == {VFS[2]: instance, VFS[3]: instance}
    finally:
        tracker.abort_instance_claim(instance)
    assert held(served) == {}


def test_claims_refusals_moves_and_frees_over_the_broker(served, broker):
    tracker = served.agent.tracker
    node = tracker.node_uuid
    a, b, c, moving, migration = (new_uuid() for _ in range(5))
    by_spec = {"spec": [{"vendor_id": "10DE", "product_id": "1eb8"}], "count": 1}
    replies = conduct(
        broker,
        claim(a, {"alias": "nic", "count": 1}, {**by_spec, "request_id": "gpu-1"}),
        ("get_instance", {"instance_uuid": a}),
    )
    first = result(replies[0])
    derived = first["pci_devices"][0]["request_id"]
    assert first["pci_devices"] == [
        vf(3, derived),
        device(GPU, "type-PCI", "1eb8", 1, "gpu-1", vendor="10de"),
    ]
    uuid.UUID(derived)  # derived from the instance and the position
    assert result(replies[1])["claim"]["pci_devices"] == first["pci_devices"]
    before = tracker.snapshot()

    # Refusals: typed, naming the field or the reason, and nothing changes.
    refused = conduct(
        broker,
        claim(b, {"alias": "gpu", "count": 1}),
        claim(b, {"alias": "nic", "count": 1, "request_id": "x"}, {**by_spec, "request_id": "x"}),
        claim(b, {"alias": "nic", "count": 65}),
        claim(b, {"spec": [{"vendor_id": "8086", "resource_class": "CUSTOM_X"}], "count": 1}),
        claim(b, {"alias": "pf", "count": 1}),  # a VF of it is held
        claim(b, {"alias": "nic", "count": 4}),  # 3 VFs free
        claim(b, by_spec),  # the only GPU is held
        claim(a, {"alias": "nic", "count": 2}),  # a different claim of a
    )
    codes = [(r["error"]["code"], r["error"]["details"]) for r in refused]
    assert codes[:4] == [
        ("pci.invalid_request", {"field": "pci_requests.0.alias"}),
        ("pci.invalid_request", {"field": "pci_requests.1.request_id"}),
        ("rpc.invalid_request", {"path": "pci_requests.0.count"}),
        ("pci.invalid_request", {"field": "pci_requests.0.spec.0.resource_class"}),
    ]
    assert [code for code, _ in codes[4:7]] == ["pci.devices_unavailable"] * 3
    assert "PFs or remote-managed" not in codes[4][1]["reason"]
    assert "needs 4: 3 free device(s) match" in codes[5][1]["reason"]
    assert codes[7][0] == "tracker.instance_claim_conflict"
    assert all(r["error"]["retriable"] is False for r in refused)
    assert refused[0]["error"]["message"].startswith(
        "PCI request: pci_requests.0.alias: unknown alias 'gpu'"
    )
    assert tracker.snapshot() is before

    # A move in, a same-node resize, frees; the owners in get_status.
    replies = conduct(
        broker,
        (
            "start_move",
            {
                "migration_uuid": migration,
                "instance_uuid": moving,
                "migration_type": "migration",
                "source_node": OTHER_NODE,
                "dest_node": node,
                "old_flavor": {"vcpus": 1, "memory_mb": 256},
                "pci_requests": [{"alias": "nic", "count": 2, "request_id": "port-9"}],
            },
        ),
        ("get_instance", {"instance_uuid": moving}),
        ("get_status", {}),
        ("revert_move", {"migration_uuid": migration}),
        ("abort_instance_claim", {"instance_uuid": a}),
        claim(c, {"alias": "pf", "count": 1}),
        ("get_status", {}),
    )
    moved = result(replies[0])
    assert moved == {"numa": None, "pci_devices": [vf(1, "port-9"), vf(2, "port-9")]}
    (move,) = result(replies[1])["moves"]
    assert (move["old_pci_devices"], move["new_pci_devices"]) == ([], moved["pci_devices"])
    claimed = result(replies[2])["pci"]["claimed"]
    assert [(h["address"], h["owner"], h["status"]) for h in claimed] == [
        (VFS[1], moving, "claimed"),
        (VFS[2], moving, "claimed"),
        (VFS[3], a, "allocated"),
        (GPU, a, "allocated"),
    ]
    assert result(replies[3]) == {"applied": True}
    assert result(replies[4]) == {"released": True}
    # Every VF is free again: the whole PF can go.
    assert result(replies[5])["pci_devices"] == [device(PF, "type-PF", "1572", 0, derived_id(c, 0))]
    assert [(h["address"], h["owner"]) for h in result(replies[6])["pci"]["claimed"]] == [(PF, c)]
    assert held(served) == {PF: c}
    tracker.abort_instance_claim(c)


# -- schema-valid requests never fail internally ------------------------------

_KEYS = ["vendor_id", "product_id", "dev_type", "physical_network", "trusted", "numa_node", "x"]
_VALUES = st.one_of(
    st.sampled_from(
        ["8086", "10de", "154C", "1572", "1eb8", "type-VF", "type-PF", "type-PCI", "physnet1", ""]
    ),
    st.sampled_from(["true", "resource_class", "808", "zzzz"]),
    st.integers(0, 2),
    st.booleans(),
)
_SPEC = st.dictionaries(
    st.sampled_from([*_KEYS, "resource_class"]), _VALUES, min_size=1, max_size=4
)
_REQUEST = st.fixed_dictionaries(
    {"count": st.one_of(st.integers(1, 3), st.integers(1, 64))},
    optional={
        "numa_policy": st.sampled_from(["required", "legacy", "preferred", "socket"]),
        "request_id": st.sampled_from(["a", "b", "port-1"]),
    },
).flatmap(
    lambda base: st.one_of(
        st.builds(lambda a: {**base, "alias": a}, st.sampled_from(["nic", "pf", "gpu", "nic "])),
        st.builds(lambda s: {**base, "spec": s}, st.lists(_SPEC, min_size=1, max_size=3)),
    )
)
EXPECTED = {"pci.invalid_request", "pci.devices_unavailable"}


def test_devices_attached_to_and_detached_from_a_running_instance(served, broker):
    """docs/rpc-api.md, ``attach_pci_devices`` and ``detach_pci_devices``
    (1.6): an interface's VF attached to a claimed instance, the same answer
    on a retry, typed refusals that change nothing, the detach and its
    retry."""
    tracker = served.agent.tracker
    inst, other = new_uuid(), new_uuid()
    port = {"alias": "nic", "count": 1, "request_id": "port-1"}
    replies = conduct(
        broker,
        claim(inst, {"alias": "nic", "count": 1, "request_id": "vf-1"}),
        ("attach_pci_devices", {"instance_uuid": inst, "pci_requests": [port]}),
        ("attach_pci_devices", {"instance_uuid": inst, "pci_requests": [port]}),
        ("get_instance", {"instance_uuid": inst}),
        version="1.6",
    )
    assert result(replies[0])["pci_devices"] == [vf(3, "vf-1")]
    assert result(replies[1]) == {"pci_devices": [vf(2, "port-1")]}
    assert result(replies[2]) == result(replies[1])  # a retry: the same device
    assert result(replies[3])["claim"]["pci_devices"] == [vf(3, "vf-1"), vf(2, "port-1")]
    assert held(served) == {VFS[3]: inst, VFS[2]: inst}
    before = tracker.snapshot()

    refused = conduct(
        broker,
        # no request id: it would repeat a derived one of the claim
        (
            "attach_pci_devices",
            {"instance_uuid": inst, "pci_requests": [{"alias": "nic", "count": 1}]},
        ),
        # the port's id again, another count
        ("attach_pci_devices", {"instance_uuid": inst, "pci_requests": [{**port, "count": 2}]}),
        # more VFs than are free (2 left)
        (
            "attach_pci_devices",
            {"instance_uuid": inst, "pci_requests": [{**port, "request_id": "p2", "count": 3}]},
        ),
        ("attach_pci_devices", {"instance_uuid": other, "pci_requests": [port]}),
        ("detach_pci_devices", {"instance_uuid": other, "addresses": [VFS[2]]}),
        ("detach_pci_devices", {"instance_uuid": inst, "addresses": ["3b:02.2"]}),
        version="1.6",
    )
    codes = [r["error"]["code"] for r in refused]
    assert codes == [
        "rpc.invalid_request",
        "tracker.instance_claim_conflict",
        "pci.devices_unavailable",
        "tracker.instance_not_found",
        "tracker.instance_not_found",
        "rpc.invalid_request",
    ], refused
    assert refused[0]["error"]["details"]["path"] == "pci_requests.0"
    assert tracker.snapshot().instances == before.instances

    detached = conduct(
        broker,
        ("detach_pci_devices", {"instance_uuid": inst, "addresses": [VFS[2].upper()]}),
        ("detach_pci_devices", {"instance_uuid": inst, "addresses": [VFS[2]]}),
        version="1.6",
    )
    assert [result(r) for r in detached] == [{"released": [VFS[2]]}, {"released": []}]
    assert held(served) == {VFS[3]: inst}
    tracker.abort_instance_claim(inst)
    assert held(served) == {}


def test_a_guest_claimed_while_it_runs_with_its_devices_keeps_them(served, broker):
    """docs/rpc-api.md, "PCI devices": ``running_devices`` (1.7) names the
    devices a guest already runs with; its requests take exactly those, and
    a claim they cannot give is refused with what the guest runs with,
    changing nothing."""
    tracker = served.agent.tracker
    inst, other = new_uuid(), new_uuid()
    vf_request = {"alias": "nic", "count": 1, "request_id": "vf-1"}
    # Left alone, the agent would choose VFS[3] (the PF's highest VF).
    (claimed,) = conduct(
        broker, claim(inst, vf_request, running_devices={"vf-1": [VFS[1]]}), version="1.7"
    )
    assert result(claimed)["pci_devices"] == [vf(1, "vf-1")]
    assert held(served) == {VFS[1]: inst}
    before = tracker.snapshot()

    refused = conduct(
        broker,
        # another claim holds it
        claim(other, vf_request, running_devices={"vf-1": [VFS[1]]}),
        # more devices than the request's count
        claim(other, vf_request, running_devices={"vf-1": [VFS[0], VFS[2]]}),
        # a device the request does not match (the GPU)
        claim(other, vf_request, running_devices={"vf-1": [GPU]}),
        # a request id the claim does not ask for
        claim(other, vf_request, running_devices={"port-9": [VFS[0]]}),
        # not an address
        claim(other, vf_request, running_devices={"vf-1": ["3b:02.0"]}),
        version="1.7",
    )
    codes = [r["error"]["code"] for r in refused]
    assert codes == [
        "pci.devices_unavailable",
        "pci.devices_unavailable",
        "pci.devices_unavailable",
        "pci.invalid_request",
        "rpc.invalid_request",
    ], refused
    assert (
        f"the guest runs with {VFS[1]}, and {VFS[1]} is not a free device"
        in (refused[0]["error"]["details"]["reason"])
    )
    assert "2 device(s)" in refused[1]["error"]["details"]["reason"]
    assert refused[3]["error"]["details"]["field"] == "running_devices"
    assert refused[4]["error"]["details"]["path"] == "running_devices.vf-1.0"
    assert tracker.snapshot().instances == before.instances
    assert held(served) == {VFS[1]: inst}
    tracker.abort_instance_claim(inst)
    assert held(served) == {}


def test_a_claim_retried_after_an_attach_is_answered_as_a_retry(served, broker):
    """issue 34, docs/rpc-api.md ``instance_claim``: the same claim sent
    again after an attach (with or without PCI requests of its own) answers
    the held claim, the attached devices with it, and changes nothing; so
    does one that also names the attached request, as nova's instance then
    holds it. A retry conflicts when, for a request id it names, the
    instance holds another number of devices: another count, an id it
    holds nothing for, devices detached since."""
    tracker = served.agent.tracker
    inst, bare = new_uuid(), new_uuid()
    vf1 = {"alias": "nic", "count": 1, "request_id": "vf-1"}
    port = {"alias": "nic", "count": 1, "request_id": "port-1"}
    port2 = {**port, "request_id": "port-2"}
    replies = conduct(
        broker,
        claim(inst, vf1),
        ("attach_pci_devices", {"instance_uuid": inst, "pci_requests": [port]}),
        claim(bare),
        ("attach_pci_devices", {"instance_uuid": bare, "pci_requests": [port2]}),
        version="1.6",
    )
    first, _, bare_first, _ = (result(r) for r in replies)
    held_before = held(served)
    assert held_before == {VFS[3]: inst, VFS[2]: inst, VFS[1]: bare}
    before = tracker.snapshot()

    retried = conduct(
        broker,
        claim(inst, vf1),
        claim(inst, vf1, port),
        claim(bare),
        version="1.6",
    )
    assert [r["ok"] for r in retried] == [True] * 3, retried
    both = [vf(3, "vf-1"), vf(2, "port-1")]
    assert result(retried[0]) == result(retried[1]) == {**first, "pci_devices": both}
    assert result(retried[2]) == {**bare_first, "pci_devices": [vf(1, "port-2")]}
    assert tracker.snapshot() is before

    conflicts = conduct(
        broker,
        claim(inst, {**vf1, "count": 2}),
        claim(inst, vf1, {**port, "request_id": "vf-9"}),
        claim(bare, port),
        ("detach_pci_devices", {"instance_uuid": inst, "addresses": [VFS[3]]}),
        claim(inst, vf1),
        claim(inst, port),
        version="1.6",
    )
    codes = [r["error"]["code"] if not r["ok"] else "ok" for r in conflicts]
    assert codes == ["tracker.instance_claim_conflict"] * 3 + ["ok"] * 1 + [
        "tracker.instance_claim_conflict",
        "ok",
    ], conflicts
    assert held(served) == {VFS[2]: inst, VFS[1]: bare}
    tracker.abort_instance_claim(inst)
    tracker.abort_instance_claim(bare)
    assert held(served) == {}


def test_schema_valid_requests_get_a_claim_or_a_typed_refusal(served):
    """Whatever the schema lets through, the answer is a claim or a refusal
    a caller can act on, never ``rpc.internal_error``; no device is ever
    held twice, nor a PF with one of its VFs."""
    endpoint = served.endpoint
    tracker = served.agent.tracker
    seen = set()

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(st.lists(st.lists(_REQUEST, max_size=3), min_size=1, max_size=3))
    def run(claims):
        held = []
        try:
            for requests in claims:
                instance = new_uuid()
                args = {
                    "instance_uuid": instance,
                    "flavor": {"vcpus": 1, "memory_mb": 64},
                    "pci_requests": requests,
                }
                validate("instance_claim", args)
                before = tracker.snapshot()
                reply = endpoint.instance_claim(None, **args)
                if not reply["ok"]:
                    assert reply["error"]["code"] in EXPECTED, (requests, reply)
                    assert tracker.snapshot() is before
                    seen.add(reply["error"]["code"])
                    continue
                held.append(instance)
                devices = reply["result"]["pci_devices"]
                assert len(devices) == sum(r["count"] for r in requests)
                seen.add("claimed" if devices else "none")
            owners = [d for d in tracker.snapshot().pci_devices if d.held]
            addresses = {d.address for d in owners}
            assert not (PF in addresses and addresses & set(VFS)), owners
        finally:
            for instance in held:
                endpoint.abort_instance_claim(None, instance_uuid=instance)

    run()
    assert seen == {"claimed", "none", *EXPECTED}  # not vacuous


PLACEMENT_HOST = "pci-placement-contract-host"
T4_ALIAS = '{"name": "t4", "vendor_id": "10de", "product_id": "1eb8"}'


def test_with_pci_in_placement_a_standalone_claim_allocates_its_devices(broker, tmp_path):
    """docs/rpc-api.md, "PCI devices": with ``[pci] report_in_placement`` a
    standalone claim (``user_id``) writes one unit of the device's class on
    its provider (a VF's: its PF's) with the flavor's allocation."""
    vf_spec = '{"vendor_id": "8086", "product_id": "154c"}'
    with PlacementServer(db_sync=False) as placement:
        served = Served(
            make_conf(
                str(tmp_path),
                broker.transport_url,
                host=PLACEMENT_HOST,
                libvirt__connection_uri=f"test://{HOST_XML}",
                pci__device_spec=[vf_spec, GPU_SPEC],
                pci__alias=[NIC_ALIAS, T4_ALIAS],
                pci__report_in_placement=True,
                reserved_host_memory_mb=0,
            ),
            placement.endpoint,
        )
        try:
            instance = new_uuid()
            call = claim(
                instance,
                {"alias": "t4", "count": 1},
                {"alias": "nic", "count": 2},
                user_id="u1",
                project_id="p1",
            )
            (reply,) = conduct(broker, call, server=PLACEMENT_HOST)
            chosen = sorted(d["address"] for d in result(reply)["pci_devices"])
            assert chosen == [VFS[2], VFS[3], GPU]
            api = placement.admin_adapter()
            root = served.node_uuid
            names = {
                p["uuid"]: p["name"]
                for p in api.get(f"/resource_providers?in_tree={root}").json()["resource_providers"]
            }
            held = api.get(f"/allocations/{instance}").json()["allocations"]
            by_name = {names[rp]: a["resources"] for rp, a in held.items()}
            host = names[root]
            assert by_name == {
                host: {"VCPU": 1, "MEMORY_MB": 256},
                f"{host}_{PF.upper()}": {"CUSTOM_PCI_8086_154C": 2},
                f"{host}_{GPU.upper()}": {"CUSTOM_PCI_10DE_1EB8": 1},
            }

            # issue 34: the call retried after an attach answers the claim
            # held, before the next audit has put the attached device in
            # the allocation as after it.
            port = {"alias": "nic", "count": 1, "request_id": "port-1"}
            attached, retried = conduct(
                broker,
                ("attach_pci_devices", {"instance_uuid": instance, "pci_requests": [port]}),
                call,
                server=PLACEMENT_HOST,
                version="1.6",
            )
            devices = result(reply)["pci_devices"] + result(attached)["pci_devices"]
            assert result(retried) == {**result(reply), "pci_devices": devices}
            assert api.get(f"/allocations/{instance}").json()["allocations"] == held
            served.agent.audit()
            (again,) = conduct(broker, call, server=PLACEMENT_HOST, version="1.6")
            assert result(again) == result(retried)
            now = api.get(f"/allocations/{instance}").json()["allocations"]
            pf_provider = next(rp for rp, name in names.items() if name == f"{host}_{PF.upper()}")
            assert now[pf_provider]["resources"] == {"CUSTOM_PCI_8086_154C": 3}
        finally:
            served.stop()
