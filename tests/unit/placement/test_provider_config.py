"""Provider config files: parsing, validation and merging (pure, no mocks)."""

import logging
import textwrap

import pytest

from rtagent.placement import provider_config as pc
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map

ROOT = "11111111-2222-4333-8444-555555555555"
CHILD = "66666666-7777-4888-9999-000000000000"

GOOD = """
meta:
  schema_version: '1.0'
providers:
  - identification:
      uuid: $COMPUTE_NODE
    inventories:
      additional:
        - CUSTOM_FPGA:
            total: 4
            reserved: 1
            allocation_ratio: 1.0
    traits:
      additional:
        - CUSTOM_RACK_12
  - identification:
      name: nic-pf0
    traits:
      additional: [CUSTOM_PHYSNET_A]
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_good_file_parses_with_nova_defaults(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    node, nic = pc.load(str(tmp_path))
    assert node.uuid == pc.COMPUTE_NODE and node.traits == {"CUSTOM_RACK_12"}
    assert node.inventories["CUSTOM_FPGA"] == Inventory(
        total=4, reserved=1, min_unit=1, max_unit=4, step_size=1, allocation_ratio=1.0
    )
    assert nic.name == "nic-pf0" and nic.traits == {"CUSTOM_PHYSNET_A"}
    assert node.source.endswith("a.yaml")


def test_missing_directory_means_no_configs(tmp_path):
    assert pc.load(str(tmp_path / "absent")) == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("meta: [", "not valid YAML"),
        ("providers: []", "'meta' mapping"),
        ("meta: {schema_version: '2.0'}", "unsupported schema_version '2.0'"),
        ("meta: {schema_version: '1.0'}\nproviders: {}", "must be a list"),
        ("meta: {schema_version: '1.0'}\nproviders: [{}]", "'identification' mapping"),
        (
            "meta: {schema_version: '1.0'}\nproviders: [{identification: {uuid: x, name: y}}]",
            "exactly one of 'uuid' or 'name'",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders: [{identification: {uuid: not-a-uuid}}]",
            "neither a UUID nor $COMPUTE_NODE",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n"
            "- identification: {name: n}\n  traits: {additional: [HW_CPU_X86_AVX]}",
            "'HW_CPU_X86_AVX' is not a CUSTOM_ name",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n"
            "- identification: {name: n}\n  inventories: {additional: [{VCPU: {total: 1}}]}",
            "'VCPU' is not a CUSTOM_ name",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n"
            "- identification: {name: n}\n  inventories: {additional: [{CUSTOM_X: {}}]}",
            "at least 'total'",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n"
            "- identification: {name: n}\n"
            "  inventories: {additional: [{CUSTOM_X: {total: 2, reserved: 3}}]}",
            "reserved <= total",
        ),
        (
            "meta: {schema_version: '1.0'}\nproviders:\n"
            "- identification: {name: n}\n"
            "  inventories: {additional: [{CUSTOM_X: {total: 2, colour: red}}]}",
            "unknown field(s) ['colour']",
        ),
    ],
)
def test_invalid_files_are_refused_with_the_file_named(tmp_path, text, message):
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(pc.ProviderConfigError) as err:
        pc.load(str(tmp_path))
    assert message in str(err.value)
    assert path in str(err.value)
    assert err.value.code == "placement.provider_config_invalid"


def test_schema_1_minor_versions_are_read(tmp_path):
    write(tmp_path, "a.yaml", "meta: {schema_version: '1.7'}\nproviders: []")
    assert pc.load(str(tmp_path)) == ()


def test_the_same_provider_in_two_files_names_both(tmp_path):
    first = write(tmp_path, "a.yaml", GOOD)
    second = write(
        tmp_path,
        "b.yaml",
        "meta: {schema_version: '1.0'}\nproviders: [{identification: {name: nic-pf0}}]",
    )
    with pytest.raises(pc.ProviderConfigError) as err:
        pc.load(str(tmp_path))
    assert second in str(err.value) and first in str(err.value)


def tree():
    root = Provider(
        uuid=ROOT,
        name="host-a",
        inventories=frozen_map({"VCPU": Inventory(total=8, max_unit=8)}),
        traits=frozenset({"COMPUTE_NODE"}),
        managed_traits=frozenset({"COMPUTE_NODE", "COMPUTE_STATUS_DISABLED"}),
        managed_classes=frozenset({"VCPU", "MEMORY_MB", "DISK_GB"}),
    )
    child = Provider(uuid=CHILD, name="nic-pf0", parent_uuid=ROOT)
    return ProviderTree([root, child])


def configs(text, tmp_path):
    write(tmp_path, "a.yaml", text)
    return pc.load(str(tmp_path))


def test_merge_adds_custom_inventories_and_traits_as_managed(tmp_path):
    merged, problems, absent = pc.merge(tree(), configs(GOOD, tmp_path))
    assert problems == [] and absent == []
    root, child = merged.get(ROOT), merged.get(CHILD)
    assert root.traits == {"COMPUTE_NODE", "CUSTOM_RACK_12"}
    assert "CUSTOM_RACK_12" in root.managed_traits
    assert set(root.inventories) == {"VCPU", "CUSTOM_FPGA"}
    assert "CUSTOM_FPGA" in root.managed_classes
    assert child.traits == {"CUSTOM_PHYSNET_A"}


def test_explicit_identification_wins_over_compute_node(tmp_path):
    text = GOOD + f"  - identification: {{uuid: '{ROOT.upper()}'}}\n"
    text += "    traits: {additional: [CUSTOM_EXPLICIT]}\n"
    merged, _, _ = pc.merge(tree(), configs(text, tmp_path))
    assert merged.get(ROOT).traits == {"COMPUTE_NODE", "CUSTOM_EXPLICIT"}


def test_a_class_or_trait_the_driver_owns_is_a_problem_naming_the_file(tmp_path):
    owned = tree()
    root = owned.get(ROOT)
    owned = owned.with_provider(
        root.replace(
            traits=root.traits | {"CUSTOM_RACK_12"},
            managed_traits=root.managed_traits | {"CUSTOM_RACK_12"},
        )
    )
    merged, problems, _ = pc.merge(owned, configs(GOOD, tmp_path))
    assert len(problems) == 1
    assert "a.yaml" in str(problems[0]) and "CUSTOM_RACK_12" in str(problems[0])
    assert "CUSTOM_FPGA" not in merged.get(ROOT).inventories  # the entry is skipped
    assert merged.get(CHILD).traits == {"CUSTOM_PHYSNET_A"}  # the rest applies


def test_absent_provider_is_logged_once(tmp_path, caplog):
    text = "meta: {schema_version: '1.0'}\nproviders: [{identification: {name: nowhere}}]"
    write(tmp_path, "a.yaml", text)
    source = pc.ProviderConfigSource(str(tmp_path), pc.load(str(tmp_path)))
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            source.apply(tree())
    assert len([r for r in caplog.records if "nowhere" in r.getMessage()]) == 1


def test_absent_is_judged_over_every_node_of_the_host(tmp_path, caplog):
    text = f"meta: {{schema_version: '1.0'}}\nproviders: [{{identification: {{uuid: '{CHILD}'}}}}]"
    write(tmp_path, "a.yaml", text)
    source = pc.ProviderConfigSource(str(tmp_path), pc.load(str(tmp_path)))
    other = ProviderTree([Provider(uuid="aaaaaaaa-2222-4333-8444-555555555555", name="b")])
    with caplog.at_level(logging.WARNING):
        source.apply_all({"n1": tree(), "n2": other})
    assert not [r for r in caplog.records if "no provider" in r.getMessage()]


def test_a_bad_reload_keeps_the_last_good_configuration(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    source = pc.ProviderConfigSource(str(tmp_path), pc.load(str(tmp_path)))
    write(tmp_path, "a.yaml", "meta: {schema_version: '9'}")
    assert source.reload() is False
    assert "a.yaml" in str(source.last_error)
    assert len(source.configs) == 2
    write(tmp_path, "a.yaml", "meta: {schema_version: '1.0'}\nproviders: []")
    assert source.reload() is True
    assert source.configs == () and source.last_error is None
