"""docs/rpc-api.md, "Instance states" (1.8), from outside: a real RabbitMQ
and Placement, the agent served as the daemon serves it. nova's states go
in with claims, moves and update_instance, come back in get_status's
``instance_states`` and in get_compute_node's stats exactly as nova's
tracker writes them; bad states are refused and change nothing."""

import uuid

import pytest

from tests.functional.rpc.conftest import Served
from tests.functional.rpc.harness import make_conf

pytestmark = pytest.mark.functional

FLAVOR = {"vcpus": 1, "memory_mb": 64}


@pytest.fixture(scope="module")
def served(broker, placement_server, tmp_path_factory):
    agent = Served(
        make_conf(str(tmp_path_factory.mktemp("states")), broker.transport_url, host="st-host"),
        placement_server.endpoint,
    )
    yield agent
    agent.stop()


def ok(reply):
    assert reply["ok"], reply
    return reply["result"]


def test_states_go_in_with_a_claim_and_are_kept_current(served):
    client = served.client()
    inst = str(uuid.uuid4())
    ok(
        client.call(
            "instance_claim",
            instance_uuid=inst,
            flavor=FLAVOR,
            project_id="p1",
            vm_state="building",
            task_state="spawning",
            os_type="linux",
        )
    )
    status = ok(client.call("get_status"))
    assert status["instance_states"][inst] == {
        "vm_state": "building",
        "task_state": "spawning",
        "os_type": "linux",
        "project_id": "p1",
    }
    node = ok(client.call("get_compute_node"))
    assert node["stats"]["num_os_type_linux"] == "1"
    assert node["stats"]["io_workload"] == "1"  # building
    assert node["current_workload"] == 1  # a task under way
    # The build ended: nova's periodic sends the difference.
    ok(
        client.call(
            "update_instance",
            instance_uuid=inst,
            vm_state="active",
            task_state=None,
            os_type=None,
            project_id="p2",
        )
    )
    node = ok(client.call("get_compute_node"))
    assert {k: v for k, v in node["stats"].items() if k != "failed_builds"} == {
        "num_instances": "1",
        "num_vm_active": "1",
        "num_task_None": "1",
        "num_os_type_None": "1",
        "num_proj_p2": "1",
        "io_workload": "0",
    }
    assert (node["current_workload"], node["running_vms"]) == (0, 1)
    ok(client.call("abort_instance_claim", instance_uuid=inst))


def test_a_move_lands_with_the_project_and_os_type_it_carried(served):
    client = served.client()
    inst, move = str(uuid.uuid4()), str(uuid.uuid4())
    ok(
        client.call(
            "start_move",
            migration_uuid=move,
            instance_uuid=inst,
            migration_type="resize",
            source_node=str(uuid.uuid4()),
            dest_node=served.node_uuid,
            old_flavor=FLAVOR,
            project_id="p3",
            vm_state="active",
            task_state="resize_prep",
            os_type="windows",
        )
    )
    assert ok(client.call("finish_move", migration_uuid=move))["applied"]
    states = ok(client.call("get_status"))["instance_states"][inst]
    assert states == {
        "vm_state": "resized",
        "task_state": None,
        "os_type": "windows",
        "project_id": "p3",
    }
    ok(client.call("revert_move", migration_uuid=move))


@pytest.mark.parametrize(
    ("method", "args", "code"),
    [
        ("instance_claim", {"vm_state": "deleted"}, "rpc.invalid_request"),
        ("instance_claim", {"vm_state": "sleeping"}, "rpc.invalid_request"),
        ("instance_claim", {"os_type": 7}, "rpc.invalid_request"),
        ("instance_claim", {"task_state": "Spawning"}, "rpc.invalid_request"),
        ("instance_claim", {"vm_state": "shelved_offloaded"}, "tracker.invalid_claim_request"),
    ],
)
def test_bad_states_are_refused_and_change_nothing(served, method, args, code):
    client = served.client()
    before = ok(client.call("get_status"))["instance_states"]
    reply = client.call(method, instance_uuid=str(uuid.uuid4()), flavor=FLAVOR, **args)
    assert not reply["ok"]
    assert reply["error"]["code"] == code
    assert ok(client.call("get_status"))["instance_states"] == before
