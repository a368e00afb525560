"""Bad ``[libvirt] images_type = rbd`` settings: one line naming the option,
exit status 2, never a traceback, from ``rtagent check-config`` and at the
start of ``rtagent run`` alike (a real subprocess; no cluster needed: each
is refused before one is looked for)."""

import os

import pytest

from tests.functional.test_cli import rtagent, write_conf

pytestmark = pytest.mark.functional


def rbd(tmp_path, **opts):
    conf = tmp_path / "ceph.conf"
    conf.write_text("[global]\nmon host = 127.0.0.1:9\n")
    settings = {"images_type": "rbd", "images_rbd_pool": "vms", "images_rbd_ceph_conf": str(conf)}
    settings.update(opts)
    return "[libvirt]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())


CASES = [
    (
        {"images_rbd_pool": ""},
        "[libvirt] images_rbd_pool: must name the pool of the guests' disks with images_type = rbd",
    ),
    (
        {"images_rbd_ceph_conf": "/nonexistent/ceph.conf"},
        "[libvirt] images_rbd_ceph_conf: /nonexistent/ceph.conf: does not exist",
    ),
    (
        {"images_rbd_ceph_conf": "/etc"},
        "[libvirt] images_rbd_ceph_conf: /etc: is not a regular file",
    ),
    ({"images_rbd_ceph_conf": "ceph.conf"}, "ceph.conf: must be an absolute path"),
    ({"images_type": "lvm"}, "[libvirt] images_type: invalid value"),
    ({"rbd_connect_timeout": "0"}, "[libvirt] rbd_connect_timeout: invalid value"),
]


@pytest.mark.parametrize("command", ["check-config", "run"])
@pytest.mark.parametrize(
    "opts, message",
    CASES,
    ids=["no-pool", "missing-conf", "conf-is-dir", "relative-conf", "lvm", "zero-timeout"],
)
def test_bad_rbd_settings_are_one_line(tmp_path, command, opts, message):
    conf = write_conf(tmp_path, extra=rbd(tmp_path, **opts))
    result = rtagent("--config-file", str(conf), command, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtagent: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "state" / "rtagent.sqlite"), "nothing was written"


def test_a_good_rbd_config_passes_check_config(tmp_path):
    conf = write_conf(tmp_path, extra=rbd(tmp_path))
    result = rtagent("--config-file", str(conf), "check-config")
    assert result.returncode == 0, result.stderr
