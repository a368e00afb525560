# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A claim's PCI requests as a caller states them: aliases resolved (a
repeated name is an OR of its entries), specs checked, request ids given or
derived, and every bad field refused naming it."""

import json

import pytest

from rtagent.pci import alias, devices, model, pools, requests
from rtagent.pci.errors import InvalidRequest

INSTANCE = "0b1e4c6e-8f49-4f0c-9d5e-1f2a3b4c5d6e"
ALIASES = alias.parse_aliases(
    [
        json.dumps(a)
        for a in (
            {"name": "vf", "vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"},
            {
                "name": "nic",
                "vendor_id": "8086",
                "product_id": "154c",
                "device_type": "type-VF",
                "numa_policy": "required",
            },
            {
                "name": "nic",
                "vendor_id": "15b3",
                "product_id": "101e",
                "device_type": "type-VF",
                "numa_policy": "required",
            },
        )
    ]
)


def parse(raw, aliases=ALIASES, **kwargs):
    return requests.parse(raw, aliases, INSTANCE, **kwargs)


def test_none_and_empty_ask_for_nothing():
    assert parse(None) == ()
    assert parse([]) == ()


def test_an_alias_gives_its_spec_policy_and_a_derived_id():
    (request,) = parse([{"alias": "vf", "count": 2}])
    assert request.count == 2
    assert [dict(s) for s in request.specs] == [
        {"vendor_id": "8086", "product_id": "154c", "dev_type": "type-VF"}
    ]
    assert request.numa_policy == pools.LEGACY
    assert request.alias_name == "vf"
    assert request.request_id == requests.derived_id(INSTANCE, 0)
    # Deterministic: a retry, or a move of the instance, derives the same.
    assert parse([{"alias": "vf", "count": 2}]) == (request,)


def test_a_repeated_alias_name_is_an_or_of_its_entries():
    (request,) = parse([{"alias": "nic", "count": 1}])
    assert [s["vendor_id"] for s in request.specs] == ["8086", "15b3"]
    assert request.numa_policy == pools.REQUIRED


def test_a_request_policy_replaces_the_alias_one():
    (request,) = parse([{"alias": "nic", "count": 1, "numa_policy": "preferred"}])
    assert request.numa_policy == pools.PREFERRED


def test_specs_given_and_ids_given():
    found = parse(
        [
            {"spec": [{"vendor_id": "10DE", "physical_network": "p1"}], "count": 1},
            {
                "spec": [{"dev_type": "type-PF"}, {"product_id": "1572"}],
                "count": 1,
                "numa_policy": "socket",
                "request_id": "port-1",
            },
        ]
    )
    assert [dict(s) for s in found[0].specs] == [{"vendor_id": "10de", "physical_network": "p1"}]
    assert found[0].request_id == requests.derived_id(INSTANCE, 0)
    assert found[1].request_id == "port-1"
    assert found[1].numa_policy == pools.SOCKET
    assert found[0].numa_policy == pools.LEGACY


@pytest.mark.parametrize(
    "raw, field",
    [
        ("vf:1", "pci_requests"),
        ([{"alias": "vf", "count": 1}] * 17, "pci_requests"),
        (["vf"], "pci_requests.0"),
        ([{"count": 1}], "pci_requests.0"),
        ([{"alias": "vf", "spec": [{"vendor_id": "8086"}], "count": 1}], "pci_requests.0"),
        ([{"alias": "vf"}], "pci_requests.0.count"),
        ([{"alias": "vf", "count": 0}], "pci_requests.0.count"),
        ([{"alias": "vf", "count": 65}], "pci_requests.0.count"),
        ([{"alias": "vf", "count": True}], "pci_requests.0.count"),
        ([{"alias": "vf", "count": 1.0}], "pci_requests.0.count"),
        ([{"alias": "vf", "count": 1, "pools": 1}], "pci_requests.0.pools"),
        ([{"alias": "gpu", "count": 1}], "pci_requests.0.alias"),
        ([{"alias": 7, "count": 1}], "pci_requests.0.alias"),
        ([{"alias": "vf", "count": 1, "numa_policy": "near"}], "pci_requests.0.numa_policy"),
        ([{"alias": "vf", "count": 1, "request_id": ""}], "pci_requests.0.request_id"),
        ([{"alias": "vf", "count": 1, "request_id": "a b"}], "pci_requests.0.request_id"),
        ([{"alias": "vf", "count": 1, "request_id": "x" * 65}], "pci_requests.0.request_id"),
        ([{"spec": [], "count": 1}], "pci_requests.0.spec"),
        ([{"spec": {"vendor_id": "8086"}, "count": 1}], "pci_requests.0.spec"),
        ([{"spec": [{}], "count": 1}], "pci_requests.0.spec.0"),
        ([{"spec": ["8086"], "count": 1}], "pci_requests.0.spec.0"),
        ([{"spec": [{"Vendor": "8086"}], "count": 1}], "pci_requests.0.spec.0"),
        ([{"spec": [{"vendor_id": "808"}], "count": 1}], "pci_requests.0.spec.0.vendor_id"),
        ([{"spec": [{"product_id": 8086}], "count": 1}], "pci_requests.0.spec.0.product_id"),
        ([{"spec": [{"dev_type": "type-X"}], "count": 1}], "pci_requests.0.spec.0.dev_type"),
        ([{"spec": [{"vendor_id": None}], "count": 1}], "pci_requests.0.spec.0.vendor_id"),
        ([{"spec": [{"dev_type": None}], "count": 1}], "pci_requests.0.spec.0.dev_type"),
        ([{"spec": [{"x": "v" * 256}], "count": 1}], "pci_requests.0.spec.0.x"),
        (
            [{"spec": [{"resource_class": "CUSTOM_X"}], "count": 1}],
            "pci_requests.0.spec.0.resource_class",
        ),
        (
            [
                {"alias": "vf", "count": 1, "request_id": "r"},
                {"alias": "vf", "count": 1, "request_id": "r"},
            ],
            "pci_requests.1.request_id",
        ),
    ],
)
def test_a_bad_request_names_its_field(raw, field):
    with pytest.raises(InvalidRequest) as caught:
        parse(raw)
    assert caught.value.field == field
    assert caught.value.code == "pci.invalid_request"
    assert str(caught.value).startswith(f"PCI request: {field}: ")


def test_an_unknown_alias_names_the_known_ones():
    with pytest.raises(InvalidRequest, match=r"unknown alias 'gpu' \(the node's \[pci\] alias: "):
        parse([{"alias": "gpu", "count": 1}])
    with pytest.raises(InvalidRequest, match=r"\[pci\] alias: none\)"):
        parse([{"alias": "gpu", "count": 1}], aliases={})


def test_with_report_in_placement_an_alias_resource_class_is_matched_here():
    """No device provider in Placement checks it yet: a request by an
    alias's resource class takes only devices of that class."""
    aliases = alias.parse_aliases(
        ['{"name": "t4", "resource_class": "CUSTOM_T4"}'], in_placement=True
    )
    (request,) = parse([{"alias": "t4", "count": 1}], aliases=aliases, in_placement=True)
    gpu = model.HostDevice("0000:af:00.0", "10de", "1eb8")
    other = model.HostDevice("0000:b0:00.0", "10de", "1eb8")
    table = devices.refresh(
        devices.make_table(), [(gpu, {"resource_class": "CUSTOM_T4"}), (other, {})]
    )
    assert pools.select(table, [request]) == {request.request_id: (gpu.address,)}


RP1, RP2 = "0b0c6a8e-0000-4000-8000-000000000001", "0b0c6a8e-0000-4000-8000-000000000002"


def test_with_report_in_placement_a_spec_may_name_the_providers_placement_allocated():
    spec = {"vendor_id": "8086", "rp_uuids": f"{RP2},{RP1}, {RP2}"}
    (request,) = requests.parse(
        [{"spec": [spec], "count": 2}], aliases={}, instance_uuid="i", in_placement=True
    )
    # A provider named twice gave two devices: the repeat is kept.
    assert request.specs[0]["rp_uuids"] == (RP1, RP2, RP2)
    (listed,) = requests.parse(
        [{"spec": [{"rp_uuids": [RP1]}], "count": 1}], {}, "i", in_placement=True
    )
    assert listed.specs[0]["rp_uuids"] == (RP1,)


@pytest.mark.parametrize(
    ("value", "in_placement", "reason"),
    [
        (RP1, False, "matched by Placement"),
        ("not-a-uuid", True, "'not-a-uuid' is not a UUID"),
        ([], True, "must name 1 to 64 provider UUIDs"),
        (7, True, "must name 1 to 64 provider UUIDs"),
    ],
)
def test_bad_rp_uuids_are_refused(value, in_placement, reason):
    with pytest.raises(InvalidRequest, match=reason) as caught:
        requests.parse(
            [{"spec": [{"rp_uuids": value}], "count": 1}], {}, "i", in_placement=in_placement
        )
    assert caught.value.field == "pci_requests.0.spec.0.rp_uuids"


def test_a_null_tag_asks_for_devices_without_it():
    # nova's spec of a tunnel port: {"physical_network": None}.
    (request,) = parse(
        [{"spec": [{"remote_managed": "true", "physical_network": None}], "count": 1}]
    )
    assert request.specs[0] == {"remote_managed": "true", "physical_network": None}
