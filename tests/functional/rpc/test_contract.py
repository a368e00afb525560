"""docs/rpc-api.md is the contract: it must match the code."""

import json
import os
import re

import pytest

from rtagent.rpc import endpoint, errors, schemas
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


def claim_with(**extra):
    return {"instance_uuid": UUID, "flavor": {"vcpus": 1, "memory_mb": 1}, **extra}


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
        # 1.3: extra_specs and image_properties are bounded, whatever keys they hold
        *[
            ("instance_claim", claim_with(**extra), path)
            for extra, path in [
                ({"extra_specs": ["hw:cpu_policy", "dedicated"]}, "extra_specs"),
                ({"extra_specs": "hw:cpu_policy=dedicated"}, "extra_specs"),
                ({"extra_specs": {"hw:numa_nodes": 2}}, "extra_specs.hw:numa_nodes"),
                ({"extra_specs": {"hw:cpu_policy": None}}, "extra_specs.hw:cpu_policy"),
                ({"extra_specs": {"hw:cpu_policy": "d" * 256}}, "extra_specs.hw:cpu_policy"),
                ({"extra_specs": {"k" * 256: "v"}}, "extra_specs"),
                ({"extra_specs": {"": "v"}}, "extra_specs"),
                ({"extra_specs": {f"spec:{i}": "v" for i in range(257)}}, "extra_specs"),
                ({"extra_specs": {"hw:cpu_policy": "dedicated\n"}}, "extra_specs.hw:cpu_policy"),
                ({"extra_specs": {"a\u202eb": "v"}}, "extra_specs.a\\u202eb"),
                ({"extra_specs": {"hw:cpu_policy": {"x": []}}}, "extra_specs.hw:cpu_policy"),
                # CPU lists that would take hours to expand
                ({"extra_specs": {"hw:numa_cpus.0": "0-9999999999"}}, "extra_specs.hw:numa_cpus.0"),
                ({"extra_specs": {"hw:numa_cpus.1": "0-1,^99999"}}, "extra_specs.hw:numa_cpus.1"),
                (
                    {"extra_specs": {"hw:cpu_dedicated_mask": "0-9_999_999_999"}},
                    "extra_specs.hw:cpu_dedicated_mask",
                ),
                (
                    {"extra_specs": {"hw:cpu_dedicated_mask": "0-\u0669\u0669\u0669\u0669\u0669"}},
                    "extra_specs.hw:cpu_dedicated_mask",
                ),
                (
                    {"image_properties": {"hw_numa_cpus.0": "0-99999999"}},
                    "image_properties.hw_numa_cpus.0",
                ),
                ({"image_properties": [["hw_numa_nodes", 2]]}, "image_properties"),
                ({"image_properties": {"hw_numa_nodes": 2.0}}, "image_properties.hw_numa_nodes"),
                ({"image_properties": {"hw_numa_nodes": [2]}}, "image_properties.hw_numa_nodes"),
                ({"image_properties": {"hw_numa_nodes": 2**63}}, "image_properties.hw_numa_nodes"),
                (
                    {"image_properties": {"img_signature": "s" * 4097}},
                    "image_properties.img_signature",
                ),
                ({"image_properties": {"k" * 256: 1}}, "image_properties"),
                ({"image_properties": {f"p{i}": True for i in range(257)}}, "image_properties"),
                ({"image_properties": {"hw_numa_nodes": NAN}}, "image_properties.hw_numa_nodes"),
            ]
        ],
        # 1.4: pci_requests are bounded too
        *[
            ("instance_claim", claim_with(pci_requests=requests), path)
            for requests, path in [
                ({"alias": "nic", "count": 1}, "pci_requests"),
                ([{"alias": "nic", "count": 1}] * 17, "pci_requests"),
                ([{"alias": "nic"}], "pci_requests.0"),
                ([{"alias": "nic", "count": 0}], "pci_requests.0.count"),
                ([{"alias": "nic", "count": 65}], "pci_requests.0.count"),
                ([{"alias": "nic", "count": 1.0}], "pci_requests.0.count"),
                ([{"alias": "", "count": 1}], "pci_requests.0.alias"),
                ([{"alias": "n" * 257, "count": 1}], "pci_requests.0.alias"),
                ([{"alias": "nic\n", "count": 1}], "pci_requests.0.alias"),
                ([{"alias": "nic", "count": 1, "pool": "x"}], "pci_requests.0"),
                (
                    [{"alias": "nic", "count": 1, "numa_policy": "near"}],
                    "pci_requests.0.numa_policy",
                ),
                ([{"alias": "nic", "count": 1, "request_id": "a b"}], "pci_requests.0.request_id"),
                ([{"spec": [], "count": 1}], "pci_requests.0.spec"),
                ([{"spec": [{}], "count": 1}], "pci_requests.0.spec.0"),
                ([{"spec": [{"vendor_id": "1"}] * 9, "count": 1}], "pci_requests.0.spec"),
                ([{"spec": [{"Vendor": "8086"}], "count": 1}], "pci_requests.0.spec.0"),
                ([{"spec": [{"x": {"a": 1}}], "count": 1}], "pci_requests.0.spec.0.x"),
                ([{"spec": [{"x": ["a"]}], "count": 1}], "pci_requests.0.spec.0.x"),
                ([{"spec": [{"x": "v" * 256}], "count": 1}], "pci_requests.0.spec.0.x"),
                ([{"spec": [{"numa_node": 65536}], "count": 1}], "pci_requests.0.spec.0.numa_node"),
                ([{"spec": [{"numa_node": 0.5}], "count": 1}], "pci_requests.0.spec.0.numa_node"),
            ]
        ],
        (
            "start_move",
            {
                "migration_uuid": UUID,
                "instance_uuid": UUID,
                "migration_type": "resize",
                "source_node": UUID,
                "dest_node": UUID,
                "old_flavor": {"vcpus": 1, "memory_mb": 1},
                "pci_requests": [{"alias": "nic", "count": 100}],
            },
            "pci_requests.0.count",
        ),
        (
            "start_move",
            {
                "migration_uuid": UUID,
                "instance_uuid": UUID,
                "migration_type": "resize",
                "source_node": UUID,
                "dest_node": UUID,
                "old_flavor": {"vcpus": 1, "memory_mb": 1},
                "extra_specs": {"hw:cpu_policy": 1},
            },
            "extra_specs.hw:cpu_policy",
        ),
        (
            "start_move",
            {
                "migration_uuid": UUID,
                "instance_uuid": UUID,
                "migration_type": "resize",
                "source_node": UUID,
                "dest_node": UUID,
                "old_flavor": {"vcpus": 1, "memory_mb": 1},
                "image_properties": {"hw_numa_cpus.0": "0-123456"},
            },
            "image_properties.hw_numa_cpus.0",
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


def test_valid_specs_and_properties_pass():
    """Keys the agent does not read, every value type an image property
    takes, and the bounds themselves."""
    endpoint.validate(
        "instance_claim",
        claim_with(
            extra_specs={
                "hw:cpu_policy": "dedicated",
                "hw:numa_cpus.0": "0-4095,^4000",
                "hw:cpu_dedicated_mask": "^0",
                "quota:cpu_shares": "1024",
                "aggregate_instance_extra_specs:ssd": "true",
                "k" * 255: "v" * 255,
                **{f"spec:{i}": "" for i in range(250)},
            },
            image_properties={
                "hw_numa_nodes": 2,
                "hw_numa_cpus.0": 1,
                "hw_numa_cpus.1": "1-3",
                "hw_qemu_guest_agent": True,
                "os_distro": None,
                "min_disk": -(2**63),
                "img_signature": "s" * 4096,
                "description": "Débian 12 \u2014 “bookworm”",
            },
        ),
    )
    endpoint.validate("instance_claim", claim_with(extra_specs=None, image_properties=None))
    endpoint.validate("instance_claim", claim_with(extra_specs={}, image_properties={}))


def test_valid_pci_requests_pass():
    endpoint.validate(
        "instance_claim",
        claim_with(
            pci_requests=[
                {"alias": "n" * 256, "count": 64, "numa_policy": "socket", "request_id": "r" * 64},
                {
                    "spec": [
                        {"vendor_id": "8086", "numa_node": 65535, "trusted": True},
                        *[{f"tag_{i}": "v" * 255 for i in range(16)}] * 7,
                    ],
                    "count": 1,
                    "request_id": "port-1:a.b_c",
                },
                *[{"alias": "nic", "count": 1}] * 14,
            ]
        ),
    )
    endpoint.validate("instance_claim", claim_with(pci_requests=None))
    endpoint.validate("instance_claim", claim_with(pci_requests=[]))


def test_the_error_table_marks_exactly_the_retriable_codes():
    text = open(DOC, encoding="utf-8").read()
    table = text.split("### Error codes", 1)[1].split("\n\n", 2)[1]
    rows = re.findall(r"^\| `([a-z_.]+)`( \\\*)? \|", table, re.M)
    assert {code for code, star in rows if star} == errors.RETRIABLE
    assert {
        "numa.invalid_constraint",
        "rpc.invalid_request",
        "pci.invalid_request",
        "pci.devices_unavailable",
    } <= {code for code, _ in rows}
