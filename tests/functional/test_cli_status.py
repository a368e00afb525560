"""``rtagent status`` against a real agent process, and without one: one
line on stderr and exit status 1, never a traceback."""

import subprocess
import time

import pytest

from rtagent.testing.placement_server import PlacementServer
from rtagent.testing.ports import free_port
from tests.functional.test_cli import RTAGENT, rtagent, write_conf
from tests.functional.test_cli_startup import silent_listener  # noqa: F401 - fixture

pytestmark = pytest.mark.functional


def assert_one_line(result, status, message):
    assert result.returncode == status, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtagent: error: ") and message in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_no_agent_is_one_line(tmp_path):
    port = free_port()
    conf = write_conf(tmp_path, extra=f"[health]\nport = {port}\n")
    result = rtagent("--config-file", str(conf), "status", timeout=30)
    assert_one_line(
        result, 1, f"rtagent is not running: nothing listens on http://127.0.0.1:{port}/status"
    )


def test_an_agent_that_does_not_answer_is_one_line(tmp_path, silent_listener):  # noqa: F811
    port, _ = silent_listener
    conf = write_conf(tmp_path, extra=f"[health]\nport = {port}\n")
    result = rtagent("--config-file", str(conf), "status", timeout=30)
    assert_one_line(result, 1, f"no answer from http://127.0.0.1:{port}/status within 5 s")


def test_no_way_to_ask_is_a_config_error(tmp_path):
    # (oslo.messaging's default transport_url is rabbit://, the local broker)
    conf = write_conf(tmp_path, extra="[DEFAULT]\ntransport_url =\n[health]\nenabled = false\n")
    result = rtagent("--config-file", str(conf), "status", timeout=30)
    assert_one_line(result, 2, "[health] enabled = false and no [DEFAULT] transport_url")


# The libvirt test driver's default host has two NUMA cells (CPUs 0-7 with
# 2048 MiB, 8-15 with 4096 MiB), of which CPUs 0, 2 and 4 are online.
NUMA_HOST = (
    "[libvirt]\nconnection_uri = test:///default\n"
    "[compute]\ncpu_dedicated_set = 2,4\ncpu_shared_set = 0\n"
)
NUMA_LINES = (
    "  NUMA cell 0: 0/2 dedicated CPU(s) pinned, 0/2048 MiB used\n"
    "  NUMA cell 1: 0/0 dedicated CPU(s) pinned, 0/4096 MiB used\n"
)


@pytest.mark.parametrize("host, lines", [("", ""), (NUMA_HOST, NUMA_LINES)], ids=["demo", "numa"])
def test_status_of_a_running_agent(tmp_path, host, lines):
    port = free_port()
    with PlacementServer(db_sync=False) as placement:
        conf = write_conf(
            tmp_path,
            endpoint=placement.endpoint,
            extra=f"[DEFAULT]\ntransport_url =\n[health]\nport = {port}\n{host}",
        )
        agent = subprocess.Popen(
            [RTAGENT, "--config-file", str(conf), "run"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert agent.poll() is None
                assert time.monotonic() < deadline, "the agent never synced"
                result = rtagent("--config-file", str(conf), "status", timeout=30)
                if result.returncode == 0 and "placement: in sync" in result.stdout:
                    break
                time.sleep(0.5)
            text = result.stdout
            assert "  placement: in sync; last sync " in text
            assert " s ago (" in text
            assert "  unknown consumers: none" in text
            assert "  rpc: off (no [DEFAULT] transport_url)" in text
            assert "  health: ok" in text
            assert lines in text if lines else "NUMA" not in text
        finally:
            agent.terminate()
            agent.wait(timeout=30)
