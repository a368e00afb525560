"""``[pci] device_spec`` parsing and matching: every field valid and
invalid, globs, regexes, wildcards, first match wins, a PF's address and
devname matching its VFs, and the host checks."""

import dataclasses
import json
import re
import time

import pytest

from rtagent.pci import model, spec
from rtagent.pci.errors import InvalidDeviceSpec
from rtagent.pci.spec import GlobAddress

PF = model.HostDevice("0000:0a:00.0", "8086", "1572", model.TYPE_PF, devname="ens1f0")
VF = model.HostDevice(
    "0000:0a:02.1", "8086", "154c", model.TYPE_VF, parent_addr="0000:0a:00.0", devname="ens1f0v1"
)
GPU = model.HostDevice("0000:81:00.0", "10de", "1eb8")
NIC = model.HostDevice("0001:02:1f.7", "15b3", "1017", devname="eth0")


def parse(*values, **kwargs):
    texts = [v if isinstance(v, str) else json.dumps(v) for v in values]
    return spec.parse_device_specs(texts, **kwargs)


def one(value, **kwargs):
    (parsed,) = parse(value, **kwargs)
    return parsed


def assert_error(raised, entry, field):
    error = raised.value
    assert (error.entry, error.field) == (entry, field)
    assert error.code == "pci.invalid_device_spec"
    assert f"entry {entry}: {field or '(entry)'}: " in str(error)
    assert error.reason and "\n" not in error.reason


# -- valid fields ----------------------------------------------------------

VALID = [
    # (name, spec, expected attributes)
    ("empty: all wildcards", {}, {"vendor_id": None, "product_id": None, "address": GlobAddress()}),
    ("vendor", {"vendor_id": "8086"}, {"vendor_id": "8086"}),
    ("vendor upper, 0x", {"vendor_id": "0x10DE"}, {"vendor_id": "10de"}),
    ("vendor padded", {"vendor_id": " 1 "}, {"vendor_id": "0001"}),
    ("vendor wildcard", {"vendor_id": "*"}, {"vendor_id": None}),
    ("product", {"product_id": "FFFF"}, {"product_id": "ffff"}),
    ("product wildcard", {"product_id": "*"}, {"product_id": None}),
    (
        "full address",
        {"address": "0000:0A:00.1"},
        {"address": GlobAddress("0000", "0a", "00", "1")},
    ),
    ("short parts", {"address": "a:0:1.7"}, {"address": GlobAddress("000a", "00", "01", "7")}),
    ("maxima", {"address": "ffff:ff:1f.7"}, {"address": GlobAddress("ffff", "ff", "1f", "7")}),
    ("glob stars", {"address": "*:0a:00.*"}, {"address": GlobAddress(None, "0a", "00", None)}),
    ("glob blanks", {"address": ":0a:00."}, {"address": GlobAddress(None, "0a", "00", None)}),
    ("bus:slot.func", {"address": "0a:00.1"}, {"address": GlobAddress(None, "0a", "00", "1")}),
    ("slot.func", {"address": "1f.1"}, {"address": GlobAddress(None, None, "1f", "1")}),
    ("func only", {"address": ".3"}, {"address": GlobAddress(function="3")}),
    ("slot only", {"address": "2"}, {"address": GlobAddress(slot="02")}),
    ("star", {"address": "*"}, {"address": GlobAddress()}),
    ("empty address", {"address": ""}, {"address": GlobAddress()}),
    (
        "spaces",
        {"address": " 0000 : 0a : 00 . 1 "},
        {"address": GlobAddress("0000", "0a", "00", "1")},
    ),
    ("devname", {"devname": "eth0"}, {"devname": "eth0", "address": GlobAddress()}),
    ("devname null", {"devname": None, "address": "0a:00.0"}, {"devname": None}),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_fields(raw, expected):
    parsed = one(raw)
    for name, value in expected.items():
        assert getattr(parsed, name) == value


def test_regex_address_compiles_each_part_and_defaults_to_any():
    parsed = one({"address": {"bus": "0[12]", "function": "[2-7]"}})
    patterns = [p.pattern for p in parsed.address.patterns]
    assert patterns == [".*", "0[12]", ".*", "[2-7]"]
    # RE2's: matched in linear time.
    assert all(type(p).__module__.startswith("re2") for p in parsed.address.patterns)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        ("0" * 257, "longer than 256 characters"),
        ("0{4294967296}", "a repetition count above 1000"),
        ("0{1,1001}", "a repetition count above 1000"),
        ("(0)\\1", "invalid escape sequence"),
        ("(?=0)", "invalid perl operator"),
        # nova's re reads {,2} as {0,2}, RE2 as text: refused, not changed.
        ("0{,2}", "write {0,n} for {,n}"),
    ],
)
def test_address_regexes_outside_re2_or_its_bounds_are_refused(pattern, why):
    with pytest.raises(InvalidDeviceSpec, match=re.escape(why)) as refused:
        one({"address": {"domain": pattern}})
    assert len(str(refused.value)) < 300


def test_a_pattern_that_backtracks_under_python_re_matches_in_linear_time():
    parsed = one({"address": {"domain": "(?:0?){400}1"}})
    started = time.thread_time()
    assert not parsed.address.matches("0000:03:00.1")
    # Python's re takes longer than the universe's age on this one. This
    # thread's CPU time (0.2 ms measured): not stretched by a loaded machine.
    assert time.thread_time() - started < 1.0


TAGS = [
    # (name, spec tags, expected tags)
    ("none", {}, {}),
    ("physnet", {"physical_network": "physnet1"}, {"physical_network": "physnet1"}),
    ("null is unset", {"physical_network": None, "trusted": None}, {}),
    (
        "true words",
        {"trusted": "true", "managed": "Yes", "live_migratable": "ON"},
        {"trusted": True, "managed": True, "live_migratable": True},
    ),
    (
        "more true words",
        {"trusted": "1", "managed": "t", "live_migratable": " y "},
        {"trusted": True, "managed": True, "live_migratable": True},
    ),
    (
        "false words",
        {"trusted": "FALSE", "managed": "no", "remote_managed": "off"},
        {"trusted": False, "managed": False, "remote_managed": False},
    ),
    (
        "more false words",
        {"trusted": "0", "managed": "f", "remote_managed": "N"},
        {"trusted": False, "managed": False, "remote_managed": False},
    ),
    (
        "JSON booleans",
        {"trusted": True, "remote_managed": False},
        {"trusted": True, "remote_managed": False},
    ),
    ("one_time_use false", {"one_time_use": "no"}, {"one_time_use": False}),
    ("standard class", {"resource_class": "pgpu"}, {"resource_class": "PGPU"}),
    ("custom class kept", {"resource_class": "custom_a16"}, {"resource_class": "CUSTOM_A16"}),
    ("custom class made", {"resource_class": "nvme-256g"}, {"resource_class": "CUSTOM_NVME_256G"}),
    ("runs become one _", {"resource_class": "a.-b"}, {"resource_class": "CUSTOM_A_B"}),
    (
        "traits sorted",
        {"traits": "HW_GPU_API_VULKAN,my-awesome-gpu"},
        {"traits": ("CUSTOM_MY_AWESOME_GPU", "HW_GPU_API_VULKAN")},
    ),
    # nova keeps the space: it becomes a leading _ (and the alias side does
    # the same, so both meet in Placement).
    ("space kept as nova", {"traits": "blue, big"}, {"traits": ("CUSTOM_BLUE", "CUSTOM__BIG")}),
    (
        "standard only if exact",
        {"traits": "hw_gpu_api_vulkan"},
        {"traits": ("CUSTOM_HW_GPU_API_VULKAN",)},
    ),
    ("repeated trait once", {"traits": "a,A,custom_a"}, {"traits": ("CUSTOM_A",)}),
    (
        "other tags kept",
        {"color": "Blue", "rank": 3, "flag": True},
        {"color": "Blue", "rank": 3, "flag": True},
    ),
]


@pytest.mark.parametrize(("raw", "expected"), [c[1:] for c in TAGS], ids=[c[0] for c in TAGS])
def test_tags(raw, expected):
    assert dict(one({"vendor_id": "8086", **raw}).tags) == expected


def test_one_time_use_with_report_in_placement():
    assert one({"one_time_use": "yes"}, report_in_placement=True).tags["one_time_use"] is True


def test_specs_are_immutable():
    parsed = one({"physical_network": "physnet1"})
    with pytest.raises(TypeError):
        parsed.tags["trusted"] = True
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.vendor_id = "8086"


def test_values_and_lists_keep_order_and_entry():
    specs = parse({"vendor_id": "1"}, [{"vendor_id": "2"}, {"vendor_id": "3"}], "[]", {})
    assert [(s.entry, s.vendor_id) for s in specs] == [
        (0, "0001"),
        (1, "0002"),
        (1, "0003"),
        (3, None),
    ]


# -- invalid ---------------------------------------------------------------

INVALID = [
    # (name, option values, entry, field)
    ("not JSON", ["{"], 0, None),
    ("empty value", [""], 0, None),
    ("a number", ["3"], 0, None),
    ("a string", ['"x"'], 0, None),
    ("list of non-objects", [[1]], 0, None),
    ("second value", [{}, "{"], 1, None),
    ("second list item", [{}, [{}, "x"]], 1, None),
    ("vendor number", [{"vendor_id": 8086}], 0, "vendor_id"),
    ("vendor not hex", [{"vendor_id": "xyz"}], 0, "vendor_id"),
    ("vendor too big", [{"vendor_id": "10000"}], 0, "vendor_id"),
    ("vendor signed", [{"vendor_id": "-1"}], 0, "vendor_id"),
    ("vendor underscore", [{"vendor_id": "1_0"}], 0, "vendor_id"),
    ("vendor empty", [{"vendor_id": ""}], 0, "vendor_id"),
    ("vendor null", [{"vendor_id": None}], 0, "vendor_id"),
    ("product not hex", [{"product_id": "15g3"}], 0, "product_id"),
    ("product too big", [{"product_id": "0x10000"}], 0, "product_id"),
    ("address too many parts", [{"address": "0:0:0:0.1"}], 0, "address"),
    ("domain too big", [{"address": "10000:0a:00.0"}], 0, "address"),
    ("bus too big", [{"address": "0:100:00.0"}], 0, "address"),
    ("slot too big", [{"address": "0:0:20.0"}], 0, "address"),
    ("function too big", [{"address": "0:0:0.8"}], 0, "address"),
    ("part not hex", [{"address": "0:0g:0.0"}], 0, "address"),
    ("two dots", [{"address": "0:0:0.1.2"}], 0, "address"),
    ("address number", [{"address": 5}], 0, "address"),
    ("address list", [{"address": ["0a"]}], 0, "address"),
    ("address null", [{"address": None}], 0, "address"),
    ("regex unknown key", [{"address": {"func": "1"}}], 0, "address"),
    ("regex invalid", [{"address": {"bus": "("}}], 0, "address"),
    ("regex not string", [{"address": {"bus": 1}}], 0, "address"),
    ("devname and address", [{"devname": "eth0", "address": "*"}], 0, "address"),
    ("devname empty", [{"devname": " "}], 0, "devname"),
    ("devname number", [{"devname": 5}], 0, "devname"),
    ("physnet number", [{"physical_network": 5}], 0, "physical_network"),
    ("physnet empty", [{"physical_network": ""}], 0, "physical_network"),
    ("class empty", [{"resource_class": ""}], 0, "resource_class"),
    ("class number", [{"resource_class": 5}], 0, "resource_class"),
    ("class invalid for Placement", [{"resource_class": "custom_a-b"}], 0, "resource_class"),
    ("class too long", [{"resource_class": "A" * 249}], 0, "resource_class"),
    ("traits empty", [{"traits": ""}], 0, "traits"),
    ("traits empty name", [{"traits": "a,,b"}], 0, "traits"),
    ("traits invalid name", [{"traits": "custom_x y"}], 0, "traits"),
    ("traits list", [{"traits": ["A"]}], 0, "traits"),
    ("physnet and class", [{"physical_network": "p", "resource_class": "X"}], 0, "resource_class"),
    ("physnet and traits", [{"physical_network": "p", "traits": "X"}], 0, "traits"),
    ("one_time_use outside Placement", [{"one_time_use": "true"}], 0, "one_time_use"),
    ("pool field dev_type", [{"dev_type": "type-PF"}], 0, "dev_type"),
    ("pool field numa_node", [{"numa_node": 0}], 0, "numa_node"),
    ("pool field rp_uuid", [{"rp_uuid": "x"}], 0, "rp_uuid"),
    ("tag list", [{"color": ["a"]}], 0, "color"),
    ("tag object", [{"color": {"a": 1}}], 0, "color"),
    ("tag empty", [{"color": " "}], 0, "color"),
    *[(f"{tag} not a boolean", [{tag: "maybe"}], 0, tag) for tag in spec.BOOLEAN_TAGS],
    *[(f"{tag} a number", [{tag: 2}], 0, tag) for tag in spec.BOOLEAN_TAGS],
]


@pytest.mark.parametrize(
    ("values", "entry", "field"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid(values, entry, field):
    with pytest.raises(InvalidDeviceSpec) as raised:
        parse(*values)
    assert_error(raised, entry, field)


# -- matching --------------------------------------------------------------

MATCHES = [
    # (name, spec, device, parent, matches)
    ("wildcard matches all", {}, GPU, None, True),
    ("vendor", {"vendor_id": "10de"}, GPU, None, True),
    ("other vendor", {"vendor_id": "8086"}, GPU, None, False),
    ("vendor and product", {"vendor_id": "10DE", "product_id": "1eb8"}, GPU, None, True),
    ("other product", {"vendor_id": "10de", "product_id": "1eb9"}, GPU, None, False),
    ("exact address", {"address": "0000:81:00.0"}, GPU, None, True),
    ("other function", {"address": "0000:81:00.1"}, GPU, None, False),
    ("glob bus", {"address": "*:81:*.*"}, GPU, None, True),
    ("glob other bus", {"address": "*:82:*.*"}, GPU, None, False),
    ("glob function", {"address": ".7"}, NIC, None, True),
    ("glob domain", {"address": "1::."}, NIC, None, True),
    ("glob other domain", {"address": "0::."}, NIC, None, False),
    (
        "regex parts",
        {"address": {"domain": "000[01]", "bus": "02", "slot": "1.", "function": "[5-7]"}},
        NIC,
        None,
        True,
    ),
    ("regex function out", {"address": {"function": "[0-6]"}}, NIC, None, False),
    # as nova (re.match): a pattern matches at the start of its part.
    ("regex matches a prefix", {"address": {"bus": "8"}}, GPU, None, True),
    ("regex anchored", {"address": {"bus": "8$"}}, GPU, None, False),
    ("PF address matches PF", {"address": "0000:0a:00.0"}, PF, None, True),
    ("PF address matches VF", {"address": "0000:0a:00.0"}, VF, None, True),
    ("short PF address too", {"address": "0:a:0.0"}, VF, None, True),
    ("VF ids still checked", {"address": "0000:0a:00.0", "product_id": "1572"}, VF, None, False),
    ("VF ids via PF", {"address": "0000:0a:00.0", "product_id": "154c"}, VF, None, True),
    # only an exact address names a PF (nova's is_single_address).
    ("glob PF address no", {"address": "0000:0a:00.*"}, VF, None, False),
    ("partial PF address no", {"address": "0a:00.0"}, VF, None, False),
    (
        "regex exact PF",
        {"address": {"domain": "0000", "bus": "0a", "slot": "00", "function": "0"}},
        VF,
        None,
        True,
    ),
    (
        "regex pattern not PF",
        {"address": {"domain": "0000", "bus": "0a", "slot": "0.", "function": "0"}},
        VF,
        None,
        False,
    ),
    (
        "regex short not PF",
        {"address": {"domain": "0", "bus": "0a", "slot": "00", "function": "0"}},
        VF,
        None,
        False,
    ),
    ("VF address itself", {"address": "0000:0a:02.1"}, VF, None, True),
    ("VF address not PF", {"address": "0000:0a:02.1"}, PF, None, False),
    ("devname", {"devname": "eth0"}, NIC, None, True),
    ("other devname", {"devname": "eth1"}, NIC, None, False),
    ("no devname", {"devname": "eth0"}, GPU, None, False),
    ("PF devname matches PF", {"devname": "ens1f0"}, PF, None, True),
    ("PF devname matches VF", {"devname": "ens1f0"}, VF, PF, True),
    ("PF devname needs parent", {"devname": "ens1f0"}, VF, None, False),
    (
        "wrong parent",
        {"devname": "ens1f0"},
        VF,
        dataclasses.replace(PF, address="0000:0b:00.0"),
        False,
    ),
    ("VF devname", {"devname": "ens1f0v1"}, VF, PF, True),
    ("devname and ids", {"devname": "ens1f0", "product_id": "1572"}, VF, PF, False),
]


@pytest.mark.parametrize(
    ("raw", "device", "parent", "expected"), [c[1:] for c in MATCHES], ids=[c[0] for c in MATCHES]
)
def test_matches(raw, device, parent, expected):
    assert one(raw).matches(device, parent) is expected


def test_first_match_wins():
    specs = parse(
        {"vendor_id": "8086", "physical_network": "a"},
        {"address": "0000:0a:00.0", "physical_network": "b"},
        {"physical_network": "c"},
    )
    assert spec.match(specs, VF).tags["physical_network"] == "a"
    assert spec.match(specs[1:], VF).tags["physical_network"] == "b"
    assert spec.match(specs, GPU).tags["physical_network"] == "c"
    assert spec.match(specs[:2], GPU) is None
    assert spec.match((), GPU) is None


def test_match_passes_the_parent():
    specs = parse({"devname": "ens1f0", "physical_network": "p"})
    assert spec.match(specs, VF, PF) is specs[0]
    assert spec.match(specs, VF) is None


# -- host checks -----------------------------------------------------------

HOST = (PF, VF, GPU, NIC)

HOST_INVALID = [
    # (name, option values, report_in_placement, entry, field)
    (
        "remote_managed matches a PF",
        [{"vendor_id": "8086", "remote_managed": "true"}],
        False,
        0,
        "remote_managed",
    ),
    (
        "remote_managed PF address and ids",
        [{}, {"address": "0000:0a:00.0", "remote_managed": "yes"}],
        False,
        1,
        "remote_managed",
    ),
    (
        "remote_managed devname absent",
        [{"devname": "ens9", "remote_managed": True}],
        False,
        0,
        "devname",
    ),
    (
        "one_time_use on a VF",
        [{"product_id": "154c", "one_time_use": "false"}],
        True,
        0,
        "one_time_use",
    ),
]


@pytest.mark.parametrize(
    ("values", "placement", "entry", "field"),
    [c[1:] for c in HOST_INVALID],
    ids=[c[0] for c in HOST_INVALID],
)
def test_check_host_refuses(values, placement, entry, field):
    specs = parse(*values, report_in_placement=placement)
    with pytest.raises(InvalidDeviceSpec) as raised:
        spec.check_host(specs, HOST, report_in_placement=placement)
    assert_error(raised, entry, field)


HOST_VALID = [
    # (name, option values, report_in_placement)
    ("no specs", [], True),
    (
        "remote_managed VFs by PF address",
        [{"address": "0000:0a:00.0", "product_id": "154c", "remote_managed": "true"}],
        False,
    ),
    ("remote_managed false on a PF", [{"vendor_id": "8086", "remote_managed": "false"}], False),
    ("remote_managed devname present", [{"devname": "ens1f0v1", "remote_managed": "true"}], False),
    ("one_time_use on a PF", [{"product_id": "1572", "one_time_use": "true"}], True),
    (
        "one_time_use on a VF outside Placement",
        [{"product_id": "154c", "one_time_use": "no"}],
        False,
    ),
    ("VF took an earlier spec", [{"product_id": "154c"}, {"one_time_use": "yes"}], True),
]


@pytest.mark.parametrize(
    ("values", "placement"), [c[1:] for c in HOST_VALID], ids=[c[0] for c in HOST_VALID]
)
def test_check_host_accepts(values, placement):
    specs = parse(*values, report_in_placement=placement)
    spec.check_host(specs, HOST, report_in_placement=placement)


# -- Placement view ----------------------------------------------------------

PLACEMENT = [
    # (name, tags, device, resource class, traits besides COMPUTE_MANAGED_PCI_DEVICE)
    ("generated class", {}, GPU, "CUSTOM_PCI_10DE_1EB8", set()),
    (
        "spec's class and traits",
        {"resource_class": "PGPU", "traits": "A"},
        GPU,
        "PGPU",
        {"CUSTOM_A"},
    ),
    (
        "live migratable",
        {"live_migratable": "yes"},
        GPU,
        "CUSTOM_PCI_10DE_1EB8",
        {"HW_PCI_LIVE_MIGRATABLE"},
    ),
    (
        "one-time-use PF",
        {"one_time_use": "yes"},
        PF,
        "CUSTOM_PCI_8086_1572",
        {"HW_PCI_ONE_TIME_USE"},
    ),
    ("not live migratable", {"live_migratable": "no"}, VF, "CUSTOM_PCI_8086_154C", set()),
]


@pytest.mark.parametrize(
    ("raw", "device", "rc", "traits"), [c[1:] for c in PLACEMENT], ids=[c[0] for c in PLACEMENT]
)
def test_placement_view(raw, device, rc, traits):
    tags = one(raw, report_in_placement=True).tags
    assert spec.resource_class_of(device, tags) == rc
    assert spec.traits_of(device, tags) == traits | {"COMPUTE_MANAGED_PCI_DEVICE"}
