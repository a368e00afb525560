# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.
"""A real Placement process on loopback: start, use, pause, stop, fail clearly."""

import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import uuid

import pytest

from rtagent.testing.placement_server import (
    START_TIMEOUT_S,
    PlacementServer,
    PlacementServerError,
)

pytestmark = [pytest.mark.functional, pytest.mark.timeout(120)]


def _refuses(port):
    """True if nothing listens on 127.0.0.1:port."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def _exited(pid):
    """True if pid is gone or a zombie (an orphan may wait for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _create_rp(client, name):
    rp_uuid = str(uuid.uuid4())
    resp = client.post("/resource_providers", json={"name": name, "uuid": rp_uuid})
    assert resp.status_code == 200, resp.text
    return rp_uuid


@pytest.fixture(scope="module")
def placement():
    with PlacementServer() as server:
        yield server


def test_create_and_read_back_resource_provider(placement):
    client = placement.admin_adapter()
    rp_uuid = _create_rp(client, "cn-read-back")

    resp = client.get(f"/resource_providers/{rp_uuid}")

    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["name"] == "cn-read-back"
    assert body["generation"] == 0
    assert placement.endpoint == f"http://127.0.0.1:{placement.port}"
    assert set(placement.timings) >= {"db_sync", "start"}


def test_pause_holds_requests_until_resume(placement):
    url = placement.endpoint + "/"
    placement.pause()
    try:
        with pytest.raises((TimeoutError, urllib.error.URLError)):
            urllib.request.urlopen(url, timeout=0.5)
    finally:
        placement.resume()
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200


def test_stop_ends_process_frees_port_and_removes_own_workdir():
    server = PlacementServer()
    server.start()
    pid, port, workdir = server.pid, server.port, server.workdir
    with open(server.pidfile) as f:
        assert int(f.read()) == pid

    server.stop()

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert _refuses(port)
    assert not os.path.exists(workdir)
    assert server.stopped_by == "SIGTERM"  # not killed after the stop timeout
    server.stop()  # idempotent


def test_stop_while_paused_is_prompt(tmp_path):
    server = PlacementServer(workdir=str(tmp_path))
    server.start()
    server.pause()

    server.stop()

    # SIGTERM stays pending in a stopped process; stop() must continue it, not wait for SIGKILL.
    assert server.stopped_by == "SIGTERM"
    assert (tmp_path / "placement.log").exists()  # a given workdir is kept


def test_exit_stops_server_when_body_raises():
    with pytest.raises(RuntimeError, match="boom"), PlacementServer() as server:
        pid = server.pid
        raise RuntimeError("boom")
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_two_servers_side_by_side_are_independent():
    # The second one builds its schema through sync_on_startup alone.
    with PlacementServer() as one, PlacementServer(db_sync=False) as two:
        assert "db_sync" not in two.timings
        assert one.port != two.port
        assert one.pid != two.pid
        rp_uuid = _create_rp(one.admin_adapter(), "only-in-one")
        assert two.admin_adapter().get(f"/resource_providers/{rp_uuid}").status_code == 404
        assert one.admin_adapter().get(f"/resource_providers/{rp_uuid}").status_code == 200


def test_launcher_failure_raises_quickly_with_log_tail(tmp_path):
    # db sync ignores [api], so only the launcher trips over this value.
    server = PlacementServer(workdir=str(tmp_path), conf_extra={"api": {"auth_strategy": "bogus"}})
    t0 = time.monotonic()

    with pytest.raises(PlacementServerError, match="exited with status 1") as err:
        server.start()

    # The exit is noticed, not the start timeout's end; the bound only
    # catches a hang (a few seconds idle, 30 s seen on a loaded machine).
    assert time.monotonic() - t0 < 10 * START_TIMEOUT_S
    assert "but found 'bogus'" in str(err.value)  # from the log tail
    assert str(tmp_path / "placement.log") in str(err.value)
    assert _exited(server.pid)


def test_db_sync_failure_raises_with_log_tail(tmp_path):
    server = PlacementServer(workdir=str(tmp_path), db="sqlite:////nonexistent-dir/placement.db")

    with pytest.raises(PlacementServerError, match="db sync exited with status 1") as err:
        server.start()

    assert "unable to open database file" in str(err.value)
    assert server.pid is None  # never launched


def test_launcher_refuses_to_run_without_config_dir(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OS_PLACEMENT_CONFIG_DIR"}
    proc = subprocess.run(
        [sys.executable, "-m", "rtagent.testing.placement_wsgi", "--portfile", "p"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2
    assert "OS_PLACEMENT_CONFIG_DIR" in proc.stderr
    assert not (tmp_path / "p").exists()


def test_server_exits_when_its_parent_dies(tmp_path):
    # A parent killed without running stop() must not leave a server behind.
    script = textwrap.dedent(
        f"""
        import os
        from rtagent.testing.placement_server import PlacementServer
        server = PlacementServer(workdir={str(tmp_path)!r})
        server.start()
        print(server.pid, server.port, flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    pid, port = (int(x) for x in out.split())

    deadline = time.monotonic() + 10
    while not (_exited(pid) and _refuses(port)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _exited(pid)
    assert _refuses(port)
