"""docs/rpc-api.md is the contract: it must match the code."""

import json
import os
import re

import pytest

from rtagent.rpc import endpoint, schemas
from rtagent.rpc.errors import InvalidRequest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "rpc-api.md")


def _doc_schemas():
    text = open(DOC, encoding="utf-8").read()
    found = {}
    for match in re.finditer(r"### `(\w+)`.*?```json\n(.*?)\n```", text, re.S):
        found[match.group(1)] = json.loads(match.group(2))
    return found


def test_every_method_is_documented_with_its_schema():
    assert _doc_schemas() == schemas.METHODS


def test_the_endpoint_serves_exactly_the_documented_methods():
    public = {
        name
        for name in dir(endpoint.AgentEndpoint)
        if not name.startswith("_") and callable(getattr(endpoint.AgentEndpoint, name))
    }
    assert public == set(schemas.METHODS)


UUID = "0b1e4c6e-8f49-4f0c-9d5e-1f2a3b4c5d6e"
NAN = float("nan")


def _deep(levels):
    value = []
    for _ in range(levels - 1):
        value = [value]
    return value


DEEP = _deep(3000)


@pytest.mark.parametrize(
    "method, args, path",
    [
        ("instance_claim", {"instance_uuid": UUID}, ""),
        (
            "instance_claim",
            {"instance_uuid": "x", "flavor": {"vcpus": 1, "memory_mb": 1}},
            "instance_uuid",
        ),
        (
            "instance_claim",
            {"instance_uuid": UUID, "flavor": {"vcpus": 0, "memory_mb": 1}},
            "flavor.vcpus",
        ),
        (
            "instance_claim",
            {"instance_uuid": UUID, "flavor": {"vcpus": True, "memory_mb": 1}},
            "flavor.vcpus",
        ),
        (
            "instance_claim",
            {"instance_uuid": UUID, "flavor": {"vcpus": 1, "memory_mb": 1}, "limits": {"cpu": 1}},
            "limits",
        ),
        ("update_instance", {"instance_uuid": UUID, "vm_state": "gone"}, "vm_state"),
        ("set_disabled", {"disabled": "yes"}, "disabled"),
        ("ping", {"x": 1}, ""),
        ("get_status", {"node_uuid": UUID + "0"}, "node_uuid"),
        ("abort_instance_claim", {"instance_uuid": UUID, "pad": "x" * 70000}, ""),
        # issue 11: what the schema alone let through
        ("abort_instance_claim", {"instance_uuid": UUID + "\n"}, "instance_uuid"),
        ("set_disabled", {"disabled": True, "reason": "x\n"}, "reason"),
        ("set_disabled", {"disabled": True, "reason": "x\u009b"}, "reason"),
        ("set_disabled", {"disabled": True, "reason": "x\u202e"}, "reason"),
        ("set_disabled", {"disabled": True, "reason": "x\ud800"}, "reason"),
        (
            "instance_claim",
            {"instance_uuid": UUID, "flavor": {"vcpus": 2.0, "memory_mb": 1}},
            "flavor.vcpus",
        ),
        (
            "instance_claim",
            {
                "instance_uuid": UUID,
                "flavor": {"vcpus": 1, "memory_mb": 1},
                "limits": {"vcpu": NAN},
            },
            "limits.vcpu",
        ),
        (
            "instance_claim",
            {
                "instance_uuid": UUID,
                "flavor": {"vcpus": 1, "memory_mb": 1},
                "limits": {"numa_topology": {"a\nb": 1}},
            },
            "limits.numa_topology.a\\nb",
        ),
        (
            "instance_claim",
            {
                "instance_uuid": UUID,
                "flavor": {"vcpus": 1, "memory_mb": 1},
                "limits": {"numa_topology": {"c": DEEP}},
            },
            "limits.numa_topology.c" + ".0" * 29,
        ),
    ],
)
def test_validation_names_the_argument(method, args, path):
    with pytest.raises(InvalidRequest) as caught:
        endpoint.validate(method, args)
    assert caught.value.code == "rpc.invalid_request"
    assert caught.value.path == path


def test_valid_arguments_pass():
    endpoint.validate(
        "instance_claim",
        {
            "instance_uuid": UUID.upper(),
            "flavor": {"vcpus": 2, "memory_mb": 4096, "root_gb": 20, "name": "m1.medium"},
            "limits": {"vcpu": 32.0, "memory_mb": None, "numa_topology": None},
            "volume_backed": False,
            "project_id": "6f70656e737461636b20697320636f6f6c",
            "assigned": {"CUSTOM_GPU": 1},
            "node_uuid": UUID,
        },
    )
