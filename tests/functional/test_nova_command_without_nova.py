"""``rtagent-nova-compute`` where the ``nova`` extra is not installed: one
line saying what to install, exit status 1, no traceback."""

import importlib.util
import os
import subprocess
import sys

import pytest

COMMAND = os.path.join(os.path.dirname(sys.executable), "rtagent-nova-compute")


@pytest.mark.skipif(
    importlib.util.find_spec("nova") is not None, reason="nova is installed in this environment"
)
def test_says_which_extra_it_needs():
    result = subprocess.run(
        [COMMAND, "--config-file", "/etc/nova/nova.conf"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "rtagent-nova-compute needs nova (pip install 'rtagent[nova]'): No module named 'nova'"
    ]
