"""Configuration text in the log lines of the real ``rtagent`` command is
escaped (docs/operations.md, "Logs"): a line of the file that runs on into
the value above it, and an option name with a bidirectional control, come
out on one line each, as status would show them. A real subprocess against
a real Placement process; no broker needed (tests/functional/rpc/
test_escaped_text.py has the RPC replies)."""

import pytest

from rtagent.excerpt import escaped
from rtagent.testing.placement_server import PlacementServer
from tests.functional.test_cli import rtagent, write_conf

pytestmark = pytest.mark.functional


@pytest.fixture
def placement_process():
    with PlacementServer(db_sync=False) as server:
        yield server


@pytest.mark.parametrize("command", [["audit", "--dry-run"], ["audit"]])
def test_configuration_text_is_one_line_in_the_log(tmp_path, placement_process, command):
    # "my_ip = ..." indented by mistake: oslo.config reads it as the second
    # line of state_path.
    conf = write_conf(
        tmp_path,
        endpoint=placement_process.endpoint,
        extra=f"[DEFAULT]\nstate_path = {tmp_path}/state\n  my_ip = 192.0.2.1\n",
    )
    with open(conf, "a", encoding="utf-8") as f:
        f.write("[pci]\nnuma\u202e_policy = legacy\n")
    result = rtagent("--config-file", str(conf), *command)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.split("\n")
    assert any(f"; state_path {tmp_path}/state\\nmy_ip = 192.0.2.1; node " in li for li in lines), (
        result.stderr
    )
    assert any("[pci] numa\\u202e_policy: unknown option; ignored" in li for li in lines), (
        result.stderr
    )
    assert not [li for li in lines if escaped(li) != li or li.startswith("my_ip")], result.stderr
