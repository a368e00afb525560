"""Configuration validation: one clear error naming the option."""

import pytest

from rtagent import conf as rtconf
from rtagent.conf import opts, validation
from rtagent.virt.libvirt.uri import validate_uri

BASE = """[placement]
auth_type = admin_token
endpoint = http://127.0.0.1:9
token = admin
[libvirt]
instances_path = {tmp}
"""


def load(tmp_path, text):
    path = tmp_path / "rtagent.conf"
    # later sections override earlier ones for the same option
    path.write_text(BASE.format(tmp=tmp_path) + text)
    conf = rtconf.new_conf()
    conf(["--config-file", str(path)], project="rtagent", default_config_files=[])
    return conf


def test_defaults_are_valid_and_match_nova(tmp_path):
    conf = load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}/state\n")
    validation.validate(conf, uri_validator=validate_uri)
    assert conf.reserved_host_memory_mb == 512
    assert conf.cpu_allocation_ratio is None
    assert (
        conf.initial_cpu_allocation_ratio,
        conf.initial_ram_allocation_ratio,
        conf.initial_disk_allocation_ratio,
    ) == (4.0, 1.0, 1.0)
    assert conf.libvirt.instances_path == str(tmp_path)
    assert conf.rtagent.audit_interval == 60
    assert conf.placement.service_type == "placement"


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "[DEFAULT]\ncpu_allocation_ratio = -1.0\n",
            "[DEFAULT] cpu_allocation_ratio: invalid value",
        ),
        (
            "[DEFAULT]\ninitial_ram_allocation_ratio = 0\n",
            "[DEFAULT] initial_ram_allocation_ratio: 0.0 must be > 0",
        ),
        (
            "[DEFAULT]\ninitial_disk_allocation_ratio = x\n",
            "[DEFAULT] initial_disk_allocation_ratio",
        ),
        ("[DEFAULT]\nreserved_host_cpus = -2\n", "[DEFAULT] reserved_host_cpus: invalid value"),
        ("[rtagent]\naudit_interval = 0\n", "[rtagent] audit_interval: invalid value"),
        ("[libvirt]\nconnection_uri = qemu//system\n", "[libvirt] connection_uri:"),
        ("[libvirt]\nconnection_uri = not a uri\n", "[libvirt] connection_uri:"),
        (
            "[DEFAULT]\nstate_path = relative/dir\n",
            "[DEFAULT] state_path: relative/dir: must be an absolute",
        ),
        (
            "[DEFAULT]\nstate_path = /etc/hostname/state\n",
            "[DEFAULT] state_path: /etc/hostname/state: does not exist",
        ),
    ],
)
def test_bad_values_name_the_option(tmp_path, text, expected):
    if "state_path" not in text:
        text += f"[DEFAULT]\nstate_path = {tmp_path}\n" if "[DEFAULT]" not in text else ""
    conf = load(tmp_path, text)
    if "state_path" not in text:
        conf.set_override("state_path", str(tmp_path))
    with pytest.raises(validation.ConfigError) as info:
        validation.validate(conf, uri_validator=validate_uri)
    assert str(info.value).startswith(expected), str(info.value)
    assert "\n" not in str(info.value)


def test_state_path_that_is_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    conf = load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}/f\n")
    with pytest.raises(validation.ConfigError, match="exists and is not a directory"):
        validation.validate(conf)


def test_every_group_is_listed_for_the_sample():
    groups = {str(g) for g, _ in opts.list_opts()}
    assert groups == {
        "DEFAULT",
        "compute",
        "libvirt",
        "pci",
        "placement",
        "rtagent",
        "daemon",
        "health",
    }


def test_nova_default_instances_path():
    conf = rtconf.new_conf()
    conf([], project="rtagent", default_config_files=[])
    assert conf.libvirt.instances_path == "/var/lib/nova/instances"


def test_zero_ratio_means_unset_as_in_nova(tmp_path):
    from rtagent.resources import MEMORY_MB, VCPU
    from rtagent.service import builder

    conf = load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}\nram_allocation_ratio = 0.0\n")
    validation.validate(conf)
    policy = builder.policy_from_conf(conf)
    assert policy.managed_ratio(MEMORY_MB) is None
    assert policy.managed_ratio(VCPU) is None


@pytest.mark.parametrize(
    ("compute", "refused"),
    [
        ("cpu_shared_set = 0-3\n", "[compute] cpu_shared_set"),
        ("cpu_dedicated_set = 4-7\n", "[compute] cpu_dedicated_set"),
        (
            "cpu_shared_set = 0-3\ncpu_dedicated_set = 4-7\n",
            "[compute] cpu_shared_set and cpu_dedicated_set",
        ),
    ],
)
def test_reserved_host_cpus_is_refused_beside_a_cpu_set(tmp_path, compute, refused):
    text = f"[DEFAULT]\nstate_path = {tmp_path}\nreserved_host_cpus = 2\n[compute]\n{compute}"
    with pytest.raises(validation.ConfigError) as info:
        validation.validate(load(tmp_path, text))
    assert str(info.value) == (
        f"[DEFAULT] reserved_host_cpus: 2 cannot be used with {refused}; set it to 0 "
        "(the CPUs left out of the sets are the host's)"
    )


@pytest.mark.parametrize(
    "text",
    [
        "[DEFAULT]\nreserved_host_cpus = 2\n",  # no set: nova's rule of old
        "[DEFAULT]\nreserved_host_cpus = 0\n[compute]\ncpu_dedicated_set = 4-7\n",
        "[DEFAULT]\nreserved_host_cpus = 2\n[compute]\ncpu_shared_set =\n",  # blank is unset
    ],
)
def test_reserved_host_cpus_without_a_cpu_set_is_fine(tmp_path, text):
    validation.validate(load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}\n" + text))


def test_reserved_huge_pages_is_multi_valued_and_on_the_policy(tmp_path):
    from rtagent.service import builder

    conf = load(
        tmp_path,
        f"[DEFAULT]\nstate_path = {tmp_path}\n"
        "reserved_huge_pages = node:1,size:1GB,count:1\n"
        "reserved_huge_pages = node:0,size:2048,count:64\n",
    )
    validation.validate(conf)
    assert builder.policy_from_conf(conf).reserved_huge_pages == ((0, 2048, 64), (1, 1048576, 1))


@pytest.mark.parametrize("value, pack", [(None, False), ("true", True), ("false", False)])
def test_the_numa_packing_strategy_reaches_the_policy(tmp_path, value, pack):
    from rtagent.service import builder

    option = f"[compute]\npacking_host_numa_cells_allocation_strategy = {value}\n" if value else ""
    conf = load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}\n{option}")
    validation.validate(conf)
    assert builder.policy_from_conf(conf).numa_pack is pack


def test_malformed_reserved_huge_pages_are_refused_by_validation(tmp_path):
    from rtagent.virt import errors

    conf = load(
        tmp_path,
        f"[DEFAULT]\nstate_path = {tmp_path}\nreserved_huge_pages = node:0,size:2048\n",
    )
    with pytest.raises(errors.InvalidReservedHugePages) as info:
        validation.validate(conf)
    assert str(info.value) == "[DEFAULT] reserved_huge_pages = 'node:0,size:2048': count: missing"
