"""etc/systemd/rtagent.service: accepted by ``systemd-analyze verify``
without a warning, and what an operator's first hour needs of it."""

import configparser
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.functional.conftest import ROOT
from tests.requirements import require

UNIT = os.path.join(ROOT, "etc", "systemd", "rtagent.service")
RTAGENT = os.path.join(os.path.dirname(sys.executable), "rtagent")


def unit():
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(UNIT)
    return parser


def test_systemd_analyze_verify_is_silent(tmp_path):
    if shutil.which("systemd-analyze") is None:
        require("systemd-analyze is not installed (tools/setup-env.sh installs it)", "unit file")
    # verify insists that ExecStart's program exists; point it at this
    # checkout's rtagent, the only change to the file.
    text = open(UNIT).read()
    assert text.count("ExecStart=/usr/bin/rtagent ") == 1
    (tmp_path / "rtagent.service").write_text(
        text.replace("ExecStart=/usr/bin/rtagent ", f"ExecStart={RTAGENT} ")
    )
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "rtagent.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "no warning either (an unknown key is only a warning)"


def test_ordered_after_libvirt_either_way():
    after = unit()["Unit"]["After"].split()
    assert {"libvirtd.service", "virtqemud.service", "network-online.target"} <= set(after)


def test_optional_read_only_paths_do_not_stop_the_unit():
    paths = unit()["Service"]["ReadOnlyPaths"].split()
    assert paths and all(p.startswith("-") for p in paths), paths


def test_state_and_logs_directories():
    service = unit()["Service"]
    assert service["StateDirectory"] == "rtagent"
    assert service["StateDirectoryMode"] == "0700"
    assert service["LogsDirectory"] == "rtagent"
    assert service["ExecStart"].startswith("/usr/bin/rtagent --config-file /etc/rtagent/")


def test_documentation_pages_are_installed_by_the_package():
    """Each Documentation= file is one the wheel installs under the prefix
    (/usr for /usr/bin/rtagent), from a file in this checkout."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data_files = tomllib.load(f)["tool"]["setuptools"]["data-files"]
    docs = unit()["Unit"]["Documentation"].split()
    assert docs
    for url in docs:
        match = re.fullmatch(r"file:///usr/(share/doc/rtagent)/([\w.-]+)", url)
        assert match, url
        directory, name = match.groups()
        sources = [s for s in data_files[directory] if os.path.basename(s) == name]
        assert sources, f"{url} is not installed by pyproject.toml's data-files"
        assert os.path.isfile(os.path.join(ROOT, sources[0]))
