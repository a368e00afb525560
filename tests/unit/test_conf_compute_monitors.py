"""[DEFAULT] compute_monitors: nova's option and spellings; anything else is
a configuration error naming the option."""

import pytest

from rtagent.conf import default, validation
from rtagent.virt.libvirt.uri import validate_uri
from tests.unit.test_conf import load


@pytest.mark.parametrize(
    "monitors, enabled",
    [
        ([], False),
        (None, False),
        (["cpu.virt_driver"], True),
        (["virt_driver"], True),  # nova's pre-namespace spelling
        (["nova.compute.monitors.cpu.virt_driver"], True),
        (["cpu.virt_driver", "virt_driver"], True),
    ],
)
def test_novas_spellings(monitors, enabled):
    assert default.cpu_monitor_enabled(monitors) is enabled


@pytest.mark.parametrize("name", ["cpu.other", "numa.mem_bw", "nova.compute.monitors.cpu"])
def test_other_monitors_are_refused(name):
    with pytest.raises(ValueError, match="unknown monitor"):
        default.cpu_monitor_enabled(["cpu.virt_driver", name])


def test_off_by_default_as_in_nova(tmp_path):
    conf = load(tmp_path, f"[DEFAULT]\nstate_path = {tmp_path}/state\n")
    validation.validate(conf, uri_validator=validate_uri)
    assert conf.compute_monitors == []
    assert not default.cpu_monitor_enabled(conf.compute_monitors)


def test_a_nova_conf_value_turns_it_on(tmp_path):
    conf = load(
        tmp_path,
        f"[DEFAULT]\nstate_path = {tmp_path}/state\ncompute_monitors = cpu.virt_driver\n",
    )
    validation.validate(conf, uri_validator=validate_uri)
    assert default.cpu_monitor_enabled(conf.compute_monitors)


def test_an_unknown_monitor_is_a_config_error(tmp_path):
    conf = load(
        tmp_path,
        f"[DEFAULT]\nstate_path = {tmp_path}/state\ncompute_monitors = cpu.virt_drivr\n",
    )
    with pytest.raises(validation.ConfigError) as info:
        validation.validate(conf, uri_validator=validate_uri)
    assert str(info.value).startswith(
        "[DEFAULT] compute_monitors: unknown monitor 'cpu.virt_drivr'"
    )
