"""``[pci]`` in the configuration: device_spec, alias and report_in_placement
are registered, read from real config files, parsed by
:func:`rtagent.conf.pci.parse` and checked by the start-up validation (and
so by check-config and a reload); each bad value is one line naming the
option, the entry and the field."""

import pytest

from rtagent import conf as rtconf
from rtagent.cmd import main as cli
from rtagent.conf import opts, pci, validation
from rtagent.pci import alias, errors, spec
from rtagent.pci import model as pci_model

BASE = """[placement]
auth_type = admin_token
endpoint = http://127.0.0.1:9
token = admin
[libvirt]
instances_path = {tmp}
[DEFAULT]
state_path = {tmp}
"""


def write(tmp_path, text):
    path = tmp_path / "rtagent.conf"
    path.write_text(BASE.format(tmp=tmp_path) + text)
    return path


def load(tmp_path, text):
    conf = rtconf.new_conf()
    conf(["--config-file", str(write(tmp_path, text))], project="rtagent", default_config_files=[])
    return conf


def test_the_defaults_are_nova_s_and_parse_to_nothing(tmp_path):
    conf = load(tmp_path, "")
    validation.validate(conf)
    assert (conf.pci.device_spec, conf.pci.alias, conf.pci.report_in_placement) == ([], [], False)
    assert pci.parse(conf) == pci.PciConfig()
    assert pci.parse(conf).aliases == {}


def test_a_valid_section_parses(tmp_path):
    # Both value forms (an object, a list of them), a JSON value over
    # several lines as nova's documentation writes them, and the two forms
    # of an address.
    conf = load(
        tmp_path,
        "[pci]\n"
        'device_spec = {"vendor_id": "8086", "product_id": "154C",\n'
        '    "physical_network": "physnet1", "trusted": "yes"}\n'
        'device_spec = [{"address": "0000:81:00.*", "resource_class": "my fpga"},\n'
        '    {"address": {"bus": "0[2-3]", "function": "[1-7]"}, "managed": "no"}]\n'
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0443",\n'
        '    "device_type": "type-PCI", "numa_policy": "required"}\n'
        'alias = {"name": "nic", "vendor_id": "8086", "product_id": "154c",\n'
        '    "device_type": "type-VF"}\n'
        'alias = {"name": "nic", "vendor_id": "15b3", "product_id": "101e",\n'
        '    "device_type": "type-VF"}\n',
    )
    validation.validate(conf)
    parsed = pci.parse(conf)
    assert parsed.report_in_placement is False
    assert [(s.entry, s.vendor_id, s.product_id) for s in parsed.device_specs] == [
        (0, "8086", "154c"),
        (1, None, None),
        (1, None, None),
    ]
    first, glob, regex = parsed.device_specs
    assert dict(first.tags) == {"physical_network": "physnet1", "trusted": True}
    assert glob.address == spec.GlobAddress("0000", "81", "00", None)
    assert dict(glob.tags) == {"resource_class": "CUSTOM_MY_FPGA"}
    assert isinstance(regex.address, spec.RegexAddress)
    assert dict(regex.tags) == {"managed": False}
    assert sorted(parsed.aliases) == ["nic", "qat"]
    assert [a.product_id for a in parsed.aliases["nic"]] == ["154c", "101e"]
    assert parsed.aliases["qat"] == (
        alias.Alias("qat", 0, "8086", "0443", "type-PCI", pci_model.REQUIRED),
    )


def test_report_in_placement_reads_aliases_as_with_pci_in_placement(tmp_path):
    conf = load(
        tmp_path,
        "[pci]\nreport_in_placement = true\n"
        'device_spec = {"vendor_id": "10de", "one_time_use": "true",\n'
        '    "traits": "blue,HW_GPU_API_VULKAN"}\n'
        'alias = {"name": "gpu", "resource_class": "CUSTOM_PCI_10DE_25B6", "traits": "blue"}\n',
    )
    validation.validate(conf)
    parsed = pci.parse(conf)
    assert parsed.report_in_placement is True
    assert dict(parsed.device_specs[0].tags) == {
        "one_time_use": True,
        "traits": ("CUSTOM_BLUE", "HW_GPU_API_VULKAN"),
    }
    (gpu,) = parsed.aliases["gpu"]
    assert (gpu.vendor_id, gpu.resource_class, gpu.traits) == (
        None,
        "CUSTOM_PCI_10DE_25B6",
        ("CUSTOM_BLUE",),
    )


def test_nova_s_deprecated_names_are_read(tmp_path):
    conf = load(
        tmp_path,
        '[DEFAULT]\npci_passthrough_whitelist = {"vendor_id": "8086"}\n'
        'pci_alias = {"name": "qat", "vendor_id": "8086", "product_id": "0443"}\n',
    )
    validation.validate(conf)
    parsed = pci.parse(conf)
    assert [s.vendor_id for s in parsed.device_specs] == ["8086"]
    assert list(parsed.aliases) == ["qat"]
    conf = load(tmp_path, '[pci]\npassthrough_whitelist = {"product_id": "0443"}\n')
    assert [s.product_id for s in pci.parse(conf).device_specs] == ["0443"]


BAD_DEVICE_SPEC = "[pci] device_spec entry"
BAD_ALIAS = "[pci] alias entry"

INVALID = [
    # device_spec: the entry is the position of the option's value.
    (
        'device_spec = {"vendor_id": "80860"}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: vendor_id: '80860' is above the maximum FFFF",
    ),
    (
        "device_spec = {vendor_id: 8086}\n",
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: (entry): not valid JSON",
    ),
    # What uncommenting the sample's "#device_spec =" gives (nova refuses it too).
    ("device_spec =\n", errors.InvalidDeviceSpec, f"{BAD_DEVICE_SPEC} 0: (entry): not valid JSON"),
    (
        'device_spec = {"vendor_id": "8086"}\n'
        'device_spec = {"devname": "eth0", "address": "*:0a:00.*"}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 1: address: address and devname exclude each other",
    ),
    (
        'device_spec = {"address": "0000:0g:00.0"}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: address: bus '0g' is not hex or *",
    ),
    (
        'device_spec = {"address": {"domain": ".*",\n    "bus": "0[", "slot": "01"}}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: address: bus: invalid regex '0[' (missing ]: [)",
    ),
    (
        'device_spec = [{"vendor_id": "8086"}, {"product_id": "zz"}]\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: product_id: 'zz' is not hex or *",
    ),
    (
        'device_spec = {"vendor_id": "8086", "one_time_use": "true"}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: one_time_use: needs [pci] report_in_placement",
    ),
    (
        'device_spec = {"vendor_id": "8086", "dev_type": "type-VF"}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: dev_type: is a field of nova's PCI pools, not a tag",
    ),
    (
        "report_in_placement = true\n"
        'device_spec = {"vendor_id": "8086", "resource_class": "FPGA", '
        '"physical_network": "physnet1"}\n',
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: resource_class: not with physical_network "
        "(such devices are not in Placement)",
    ),
    # A deprecated name is reported under the option's name.
    (
        "passthrough_whitelist = 42\n",
        errors.InvalidDeviceSpec,
        f"{BAD_DEVICE_SPEC} 0: (entry): not a JSON object or a list of them",
    ),
    # alias
    (
        'alias = {"name": "qat", "vendor_id": "8086"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 0: product_id: needed (without [pci] report_in_placement)",
    ),
    (
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0443", '
        '"capability_type": "pci"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 0: capability_type: unknown key (one of name, vendor_id, product_id, "
        "device_type, numa_policy, resource_class, traits, live_migratable)",
    ),
    (
        'alias = [{"name": "qat", "vendor_id": "8086", "product_id": "0443"}]\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 0: (entry): not a JSON object (repeat the option for more aliases)",
    ),
    (
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0443", '
        '"device_type": "type-PCI"}\n'
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0444", '
        '"device_type": "type-PCI", "numa_policy": "required"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 1: numa_policy: required differs from legacy of 'qat' in entry 0",
    ),
    (
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0443", '
        '"numa_policy": "strict"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 0: numa_policy: 'strict' is not one of required, legacy, preferred, socket",
    ),
    # With report_in_placement, as nova's pci_in_placement reads them.
    (
        "report_in_placement = true\n"
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0443", '
        '"device_type": "type-PCI"}\n'
        'alias = {"name": "qat", "vendor_id": "8086", "product_id": "0444", '
        '"device_type": "type-PCI"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 1: name: 'qat' repeats entry 0"
        " (one entry per name with [pci] report_in_placement)",
    ),
    (
        'report_in_placement = true\nalias = {"name": "gpu", "traits": "blue"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 0: resource_class: or vendor_id and product_id needed",
    ),
    (
        '[DEFAULT]\npci_alias = {"name": "a:b", "vendor_id": "8086", "product_id": "0443"}\n',
        errors.InvalidAlias,
        f"{BAD_ALIAS} 0: name: 'a:b' must be 1-256 characters, no ',' or ':'",
    ),
    # report_in_placement: oslo.config's boolean, read up front.
    (
        "report_in_placement = maybe\n",
        validation.ConfigError,
        "[pci] report_in_placement: invalid value: Unexpected boolean value 'maybe'",
    ),
]


@pytest.mark.parametrize("text, error, message", INVALID)
def test_an_invalid_value_is_one_line_naming_option_entry_and_field(tmp_path, text, error, message):
    conf = load(tmp_path, f"[pci]\n{text}")
    with pytest.raises(error) as info:
        validation.validate(conf)
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_the_errors_carry_entry_and_field_and_a_stable_code(tmp_path):
    conf = load(
        tmp_path, '[pci]\ndevice_spec = {"vendor_id": "8086"}\ndevice_spec = {"devname": ""}\n'
    )
    with pytest.raises(errors.InvalidDeviceSpec) as info:
        pci.parse(conf)
    assert (info.value.code, info.value.entry, info.value.field) == (
        "pci.invalid_device_spec",
        1,
        "devname",
    )
    conf = load(tmp_path, "[pci]\nalias = {}\n")
    with pytest.raises(errors.InvalidAlias) as info:
        pci.parse(conf)
    assert (info.value.code, info.value.entry, info.value.field) == ("pci.invalid_alias", 0, "name")


def test_a_reload_checks_the_new_pci_values(tmp_path):
    # What SIGHUP runs (rtagent.cmd.main._run's reload_conf): a fresh
    # ConfigOpts over the same files, checked whole; an error refuses the
    # reload and the running configuration is kept.
    path = write(tmp_path, '[pci]\ndevice_spec = {"vendor_id": "8086"}\n')
    argv = ["--config-file", str(path), "run"]
    cli._validate(cli._load_conf(argv))
    path.write_text(path.read_text() + 'device_spec = {"vendor_id": "x"}\n')
    with pytest.raises(errors.InvalidDeviceSpec, match=r"^\[pci\] device_spec entry 1: vendor_id"):
        cli._validate(cli._load_conf(argv))


def test_the_options_need_a_restart():
    # Not mutable: a changed value that checks out is logged by oslo.config as
    # "Ignoring change to immutable option pci.device_spec" on SIGHUP.
    assert [o.name for o in pci.ALL_OPTS if o.mutable] == []


def test_the_group_is_in_the_sample():
    listed = dict((str(group), names) for group, names in opts.list_opts())
    assert [o.name for o in listed["pci"]] == ["device_spec", "alias", "report_in_placement"]
