"""``[pci] alias`` parsing and matching: every field valid and invalid,
repeated names, the pci_in_placement rules, and which devices (with their
spec tags) satisfy an alias."""

import dataclasses
import json

import pytest

from rtagent.pci import alias, model
from rtagent.pci.errors import InvalidAlias

PF = model.HostDevice("0000:0a:00.0", "8086", "1572", model.TYPE_PF)
VF = model.HostDevice("0000:0a:02.1", "8086", "154c", model.TYPE_VF, parent_addr="0000:0a:00.0")
GPU = model.HostDevice("0000:81:00.0", "10de", "1eb8")

IDS = {"vendor_id": "10de", "product_id": "1eb8"}


def parse(*values, **kwargs):
    texts = [v if isinstance(v, str) else json.dumps(v) for v in values]
    return alias.parse_aliases(texts, **kwargs)


def one(value, **kwargs):
    ((entry,),) = parse(value, **kwargs).values()
    return entry


def assert_error(raised, entry, field):
    error = raised.value
    assert (error.entry, error.field) == (entry, field)
    assert error.code == "pci.invalid_alias"
    assert f"entry {entry}: {field or '(entry)'}: " in str(error)
    assert error.reason and "\n" not in error.reason


# -- valid -----------------------------------------------------------------

VALID = [
    # (name, alias, in_placement, expected attributes)
    (
        "ids",
        {"name": "gpu", **IDS},
        False,
        {
            "name": "gpu",
            "vendor_id": "10de",
            "product_id": "1eb8",
            "device_type": None,
            "numa_policy": "legacy",
            "resource_class": None,
            "traits": (),
            "live_migratable": None,
            "entry": 0,
        },
    ),
    (
        "ids upper case",
        {"name": "gpu", "vendor_id": "10DE", "product_id": "1EB8"},
        False,
        {"vendor_id": "10de", "product_id": "1eb8"},
    ),
    ("name stripped", {"name": " gpu ", **IDS}, False, {"name": "gpu"}),
    ("name of 256", {"name": "n" * 256, **IDS}, False, {"name": "n" * 256}),
    *[
        (f"device_type {t}", {"name": "a", "device_type": t, **IDS}, False, {"device_type": t})
        for t in model.ALIAS_DEVICE_TYPES
    ],
    *[
        (f"numa_policy {p}", {"name": "a", "numa_policy": p, **IDS}, False, {"numa_policy": p})
        for p in alias.NUMA_POLICIES
    ],
    (
        "resource_class alone in Placement",
        {"name": "a", "resource_class": "gpu-vf"},
        True,
        {"resource_class": "CUSTOM_GPU_VF", "vendor_id": None},
    ),
    ("standard class", {"name": "a", "resource_class": "pgpu"}, True, {"resource_class": "PGPU"}),
    (
        "resource_class with ids outside Placement",
        {"name": "a", "resource_class": "X", **IDS},
        False,
        {"resource_class": "CUSTOM_X"},
    ),
    (
        "traits",
        {"name": "a", "traits": "blue, big,HW_GPU_API_VULKAN", **IDS},
        False,
        {"traits": ("CUSTOM_BLUE", "CUSTOM__BIG", "HW_GPU_API_VULKAN")},
    ),
    (
        "live_migratable yes",
        {"name": "a", "live_migratable": "YES", **IDS},
        False,
        {"live_migratable": True},
    ),
    (
        "live_migratable false",
        {"name": "a", "live_migratable": "false", **IDS},
        False,
        {"live_migratable": False},
    ),
]


@pytest.mark.parametrize(
    ("raw", "placement", "expected"), [c[1:] for c in VALID], ids=[c[0] for c in VALID]
)
def test_valid(raw, placement, expected):
    parsed = one(raw, in_placement=placement)
    for name, value in expected.items():
        assert getattr(parsed, name) == value


def test_repeated_name_is_or_in_order():
    parsed = parse(
        {"name": "qat", "device_type": "type-PCI", "vendor_id": "8086", "product_id": "0443"},
        {"name": "other", **IDS},
        {"name": "qat", "device_type": "type-PCI", "vendor_id": "8086", "product_id": "0442"},
    )
    assert list(parsed) == ["qat", "other"]
    assert [(a.entry, a.product_id) for a in parsed["qat"]] == [(0, "0443"), (2, "0442")]
    assert isinstance(parsed["qat"], tuple)
    with pytest.raises(TypeError):
        parsed["new"] = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed["other"][0].name = "x"


def test_no_values_no_aliases():
    assert dict(parse()) == {}


# -- invalid ---------------------------------------------------------------

REPEAT_PCI = {"name": "a", "device_type": "type-PCI", **IDS}

INVALID = [
    # (name, option values, in_placement, entry, field)
    ("not JSON", ["{"], False, 0, None),
    ("empty", [""], False, 0, None),
    ("a list", [[{"name": "a", **IDS}]], False, 0, None),
    ("a string", ['"a"'], False, 0, None),
    ("second value", [{"name": "a", **IDS}, "{"], False, 1, None),
    ("unknown key", [{"name": "a", "foo": "x", **IDS}], False, 0, "foo"),
    (
        "dev_type is device_type",
        [{"name": "a", "dev_type": "type-PF", **IDS}],
        False,
        0,
        "dev_type",
    ),
    (
        "capability_type",
        [{"name": "a", "capability_type": "pci", **IDS}],
        False,
        0,
        "capability_type",
    ),
    ("name missing", [IDS], False, 0, "name"),
    ("name number", [{"name": 5, **IDS}], False, 0, "name"),
    ("name empty", [{"name": "", **IDS}], False, 0, "name"),
    ("name blank", [{"name": "  ", **IDS}], False, 0, "name"),
    ("name too long", [{"name": "n" * 257, **IDS}], False, 0, "name"),
    ("name with colon", [{"name": "a:1", **IDS}], False, 0, "name"),
    ("name with comma", [{"name": "a,b", **IDS}], False, 0, "name"),
    (
        "vendor number",
        [{"name": "a", "vendor_id": 8086, "product_id": "1eb8"}],
        False,
        0,
        "vendor_id",
    ),
    (
        "vendor 3 digits",
        [{"name": "a", "vendor_id": "808", "product_id": "1eb8"}],
        False,
        0,
        "vendor_id",
    ),
    (
        "vendor 5 digits",
        [{"name": "a", "vendor_id": "08086", "product_id": "1eb8"}],
        False,
        0,
        "vendor_id",
    ),
    (
        "vendor wildcard",
        [{"name": "a", "vendor_id": "*", "product_id": "1eb8"}],
        False,
        0,
        "vendor_id",
    ),
    (
        "product 0x",
        [{"name": "a", "vendor_id": "8086", "product_id": "0x1e"}],
        False,
        0,
        "product_id",
    ),
    (
        "product not hex",
        [{"name": "a", "vendor_id": "8086", "product_id": "zzzz"}],
        False,
        0,
        "product_id",
    ),
    (
        "device_type vdpa",
        [{"name": "a", "device_type": "type-VDPA", **IDS}],
        False,
        0,
        "device_type",
    ),
    # nova's own name for the type: a vDPA device is never an alias's.
    (
        "device_type vdpa (nova's)",
        [{"name": "a", "device_type": "vdpa", **IDS}],
        False,
        0,
        "device_type",
    ),
    ("device_type null", [{"name": "a", "device_type": None, **IDS}], False, 0, "device_type"),
    ("numa_policy empty", [{"name": "a", "numa_policy": "", **IDS}], False, 0, "numa_policy"),
    (
        "numa_policy unknown",
        [{"name": "a", "numa_policy": "strict", **IDS}],
        False,
        0,
        "numa_policy",
    ),
    (
        "resource_class empty",
        [{"name": "a", "resource_class": "", **IDS}],
        False,
        0,
        "resource_class",
    ),
    (
        "resource_class invalid",
        [{"name": "a", "resource_class": "custom_a b", **IDS}],
        False,
        0,
        "resource_class",
    ),
    ("traits empty", [{"name": "a", "traits": "", **IDS}], False, 0, "traits"),
    ("traits empty name", [{"name": "a", "traits": "a,,b", **IDS}], False, 0, "traits"),
    ("traits list", [{"name": "a", "traits": ["A"], **IDS}], False, 0, "traits"),
    (
        "live_migratable word",
        [{"name": "a", "live_migratable": "maybe", **IDS}],
        False,
        0,
        "live_migratable",
    ),
    (
        "live_migratable JSON boolean",
        [{"name": "a", "live_migratable": True, **IDS}],
        False,
        0,
        "live_migratable",
    ),
    ("no vendor outside Placement", [{"name": "a", "product_id": "1eb8"}], False, 0, "vendor_id"),
    ("no product outside Placement", [{"name": "a", "vendor_id": "10de"}], False, 0, "product_id"),
    (
        "class is not ids outside Placement",
        [{"name": "a", "resource_class": "X"}],
        False,
        0,
        "vendor_id",
    ),
    (
        "neither ids nor class in Placement",
        [{"name": "a", "vendor_id": "10de"}],
        True,
        0,
        "resource_class",
    ),
    ("traits alone in Placement", [{"name": "a", "traits": "X"}], True, 0, "resource_class"),
    (
        "repeated name in Placement",
        [{"name": "a", **IDS}, {"name": "a", "resource_class": "X"}],
        True,
        1,
        "name",
    ),
    (
        "repeated: other numa_policy",
        [REPEAT_PCI, {**REPEAT_PCI, "numa_policy": "required"}],
        False,
        1,
        "numa_policy",
    ),
    (
        "repeated: explicit legacy same",
        [
            REPEAT_PCI,
            {**REPEAT_PCI, "numa_policy": "legacy"},
            {**REPEAT_PCI, "device_type": "type-VF"},
        ],
        False,
        2,
        "device_type",
    ),
    (
        "repeated: other device_type",
        [REPEAT_PCI, {**REPEAT_PCI, "device_type": "type-PF"}],
        False,
        1,
        "device_type",
    ),
    (
        "repeated: first without device_type",
        [IDS | {"name": "a"}, REPEAT_PCI],
        False,
        1,
        "device_type",
    ),
    (
        "repeated: second without device_type",
        [REPEAT_PCI, IDS | {"name": "a"}],
        False,
        1,
        "device_type",
    ),
    (
        "repeated: neither with device_type",
        [IDS | {"name": "a"}, IDS | {"name": "a"}],
        False,
        1,
        "device_type",
    ),
]


@pytest.mark.parametrize(
    ("values", "placement", "entry", "field"),
    [c[1:] for c in INVALID],
    ids=[c[0] for c in INVALID],
)
def test_invalid(values, placement, entry, field):
    with pytest.raises(InvalidAlias) as raised:
        parse(*values, in_placement=placement)
    assert_error(raised, entry, field)


# -- matching --------------------------------------------------------------

MATCHES = [
    # (name, alias fields, device, device spec tags, in_placement, matches)
    ("ids", IDS, GPU, {}, False, True),
    ("other product", {"vendor_id": "10de", "product_id": "1eb9"}, GPU, {}, False, False),
    ("other vendor", {"vendor_id": "8086", "product_id": "1eb8"}, GPU, {}, False, False),
    ("type asked", {**IDS, "device_type": "type-PCI"}, GPU, {}, False, True),
    ("other type", {**IDS, "device_type": "type-VF"}, GPU, {}, False, False),
    ("VF without a type", {"vendor_id": "8086", "product_id": "154c"}, VF, {}, False, True),
    (
        "VF asked",
        {"vendor_id": "8086", "product_id": "154c", "device_type": "type-VF"},
        VF,
        {},
        False,
        True,
    ),
    # nova offers PFs only to requests asking type-PF.
    ("PF without a type", {"vendor_id": "8086", "product_id": "1572"}, PF, {}, False, False),
    (
        "PF asked",
        {"vendor_id": "8086", "product_id": "1572", "device_type": "type-PF"},
        PF,
        {},
        False,
        True,
    ),
    # an alias cannot ask for a remote-managed device, so never gets one.
    (
        "remote-managed VF",
        {"vendor_id": "8086", "product_id": "154c"},
        VF,
        {"remote_managed": True},
        False,
        False,
    ),
    (
        "not remote-managed VF",
        {"vendor_id": "8086", "product_id": "154c"},
        VF,
        {"remote_managed": False},
        False,
        True,
    ),
    (
        "live migratable asked",
        {**IDS, "live_migratable": "yes"},
        GPU,
        {"live_migratable": True},
        False,
        True,
    ),
    (
        "live migratable not there",
        {**IDS, "live_migratable": "yes"},
        GPU,
        {"live_migratable": False},
        False,
        False,
    ),
    ("live migratable untagged", {**IDS, "live_migratable": "yes"}, GPU, {}, False, False),
    (
        "not live migratable asked",
        {**IDS, "live_migratable": "no"},
        GPU,
        {"live_migratable": False},
        False,
        True,
    ),
    # as nova: a device without the tag matches neither value.
    ("not live migratable untagged", {**IDS, "live_migratable": "no"}, GPU, {}, False, False),
    ("either", IDS, GPU, {"live_migratable": True}, False, True),
    # Placement matches classes and traits: outside it they do not count.
    ("class ignored outside Placement", {**IDS, "resource_class": "X"}, GPU, {}, False, True),
    ("traits ignored outside Placement", {**IDS, "traits": "X"}, GPU, {}, False, True),
    ("physnet outside Placement", IDS, GPU, {"physical_network": "p"}, False, True),
    ("generated class", IDS, GPU, {}, True, True),
    ("generated class, device has its own", IDS, GPU, {"resource_class": "CUSTOM_X"}, True, False),
    ("class asked", {"resource_class": "x"}, GPU, {"resource_class": "CUSTOM_X"}, True, True),
    ("other class", {"resource_class": "y"}, GPU, {"resource_class": "CUSTOM_X"}, True, False),
    ("class asked, generated", {"resource_class": "CUSTOM_PCI_10DE_1EB8"}, GPU, {}, True, True),
    (
        "traits present",
        {**IDS, "traits": "blue"},
        GPU,
        {"traits": ("CUSTOM_BIG", "CUSTOM_BLUE")},
        True,
        True,
    ),
    (
        "trait missing",
        {**IDS, "traits": "blue,red"},
        GPU,
        {"traits": ("CUSTOM_BLUE",)},
        True,
        False,
    ),
    ("automatic trait", {**IDS, "traits": "COMPUTE_MANAGED_PCI_DEVICE"}, GPU, {}, True, True),
    (
        "live migratable trait",
        {**IDS, "traits": "HW_PCI_LIVE_MIGRATABLE"},
        GPU,
        {"live_migratable": True},
        True,
        True,
    ),
    ("physnet devices are not in Placement", IDS, GPU, {"physical_network": "p"}, True, False),
]


@pytest.mark.parametrize(
    ("fields", "device", "tags", "placement", "expected"),
    [c[1:] for c in MATCHES],
    ids=[c[0] for c in MATCHES],
)
def test_matches(fields, device, tags, placement, expected):
    entry = one({"name": "a", **fields}, in_placement=placement)
    assert entry.matches(device, tags, in_placement=placement) is expected


def test_match_takes_the_first_entry_that_fits():
    entries = parse(
        {"name": "nic", "device_type": "type-VF", "vendor_id": "15b3", "product_id": "1018"},
        {"name": "nic", "device_type": "type-VF", "vendor_id": "8086", "product_id": "154c"},
        {
            "name": "nic",
            "device_type": "type-VF",
            "vendor_id": "8086",
            "product_id": "154c",
            "live_migratable": "yes",
        },
    )["nic"]
    assert alias.match(entries, VF, {}).entry == 1
    assert alias.match(entries[2:], VF, {"live_migratable": True}).entry == 2
    assert alias.match(entries[:1], VF, {}) is None


REQUEST_SPECS = [
    # (name, alias fields, in_placement, nova's request spec, class asked of Placement)
    ("ids", IDS, False, IDS, "CUSTOM_PCI_10DE_1EB8"),
    (
        "all fields",
        {
            **IDS,
            "device_type": "type-VF",
            "resource_class": "x",
            "traits": "b,a",
            "live_migratable": "Yes",
            "numa_policy": "required",
        },
        False,
        {
            **IDS,
            "dev_type": "type-VF",
            "resource_class": "CUSTOM_X",
            "traits": "CUSTOM_A,CUSTOM_B",
            "live_migratable": "true",
        },
        "CUSTOM_X",
    ),
    (
        "not live migratable",
        {**IDS, "live_migratable": "n"},
        False,
        {**IDS, "live_migratable": "false"},
        "CUSTOM_PCI_10DE_1EB8",
    ),
    ("class only", {"resource_class": "PGPU"}, True, {"resource_class": "PGPU"}, "PGPU"),
]


@pytest.mark.parametrize(
    ("fields", "placement", "request_spec", "rc"),
    [c[1:] for c in REQUEST_SPECS],
    ids=[c[0] for c in REQUEST_SPECS],
)
def test_request_spec(fields, placement, request_spec, rc):
    entry = one({"name": "a", **fields}, in_placement=placement)
    assert entry.request_spec() == request_spec
    assert entry.requested_resource_class == rc
