"""Start-up checks of the ``rtagent`` command, run as an operator runs it
(a real subprocess over a temporary config file): each bad setting ends the
command with exit status 2 and one line on stderr naming the option, before
anything is written or sent over the network."""

import os
import re
import socket

import pytest

from tests.functional.test_cli import rtagent, write_conf

pytestmark = pytest.mark.functional


@pytest.fixture
def silent_listener():
    """A loopback port that accepts connections into its backlog and never
    answers: afterwards, whether anything connected is known."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)

        def contacted():
            try:
                conn, _ = sock.accept()
            except BlockingIOError:
                return False
            conn.close()
            return True

        yield sock.getsockname()[1], contacted


def assert_one_line_exit_2(result, message):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rtagent: error: "), lines[0]
    assert message in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_password_auth_without_a_password_stops_before_contacting_keystone(
    tmp_path, silent_listener
):
    port, contacted = silent_listener
    extra = (
        f"[placement]\nauth_type = password\nauth_url = http://127.0.0.1:{port}/identity\n"
        "username = admin\nproject_name = admin\n"
    )
    for command in ("audit", "run"):
        result = rtagent("--config-file", str(write_conf(tmp_path, extra=extra)), command)
        assert_one_line_exit_2(result, "[placement] password: required when auth_type = password")
    assert not contacted(), "Keystone was contacted"
    assert not (tmp_path / "state").exists()


def test_password_auth_without_a_user_names_both_options(tmp_path):
    extra = "[placement]\nauth_type = v3password\nauth_url = http://127.0.0.1:9/v3\npassword = x\n"
    result = rtagent("--config-file", str(write_conf(tmp_path, extra=extra)), "audit")
    assert_one_line_exit_2(
        result, "[placement] username or user_id: required when auth_type = v3password"
    )


@pytest.mark.parametrize(
    "url, message",
    [
        ("notaurl", "[DEFAULT] transport_url: notaurl: No scheme specified"),
        ("rabbit://u:secret@[::1:5672/", "[DEFAULT] transport_url: rabbit://u:***@[::1:5672/"),
        ("rabit://u:secret@h:5672/", "no driver 'rabit'"),
        ("rabbit://u:secret@h:99999/", "port 99999 is out of range"),
        # An unencoded "/" in the password is what breaks parsing.
        ("rabbit://u:se/cret@h:5672/", "[DEFAULT] transport_url: rabbit://u:***@h:5672/"),
    ],
)
def test_malformed_transport_url(tmp_path, url, message):
    conf = write_conf(tmp_path, extra=f"[DEFAULT]\ntransport_url = {url}\n")
    result = rtagent("--config-file", str(conf), "run")
    assert_one_line_exit_2(result, message)
    for part in ("secret", "se/", "cret"):
        assert part not in result.stderr, "the password reached the message"
    assert not (tmp_path / "state").exists()


def test_malformed_notification_transport_url(tmp_path):
    conf = write_conf(tmp_path, extra="[oslo_messaging_notifications]\ntransport_url = x\n")
    result = rtagent("--config-file", str(conf), "run")
    assert_one_line_exit_2(result, "[oslo_messaging_notifications] transport_url: x:")


@pytest.mark.parametrize(
    "path, message",
    [("missing.xml", "does not exist"), (".", "is not a regular file")],
)
def test_missing_test_driver_file(tmp_path, path, message):
    target = os.path.normpath(tmp_path / path)
    conf = write_conf(tmp_path, extra=f"[libvirt]\nconnection_uri = test://{target}\n")
    result = rtagent("--config-file", str(conf), "audit")
    assert_one_line_exit_2(result, f"[libvirt] connection_uri: test://{target}: ")
    assert message in result.stderr
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        # The demo host (libvirt's test driver) has CPUs 0, 2 and 4 online.
        (
            "cpu_shared_set = 0-7\n",
            "[compute] cpu_shared_set = '0-7': CPUs 1,3,5-7 are not online",
        ),
        ("cpu_dedicated_set = 4-5\n", "[compute] cpu_dedicated_set = '4-5': CPUs 5 are not"),
        (
            "cpu_shared_set = 0,2\ncpu_dedicated_set = 2,4\n",
            "[compute] cpu_dedicated_set = '2,4': overlaps cpu_shared_set on CPUs 2",
        ),
        ("cpu_shared_set = 0-x\n", "[compute] cpu_shared_set = '0-x': bad item"),
    ],
)
def test_cpu_sets_naming_offline_cpus(tmp_path, extra, message):
    conf = write_conf(tmp_path, extra=f"[compute]\n{extra}")
    for command in ("audit", "run"):
        result = rtagent("--config-file", str(conf), command)
        assert_one_line_exit_2(result, message)
    assert not (tmp_path / "state").exists()


def test_cpu_sets_of_online_cpus_start(tmp_path):
    conf = write_conf(tmp_path, extra="[compute]\ncpu_shared_set = 0,2\ncpu_dedicated_set = 4\n")
    result = rtagent("--config-file", str(conf), "audit", "--dry-run")
    # Placement is unreachable here: the command gets past every start-up
    # check (the start-up line is logged) and fails later, with status 1.
    assert "rtagent: error: [compute]" not in result.stderr, result.stderr
    assert re.search(r"rtagent \S+ audit --dry-run: config files ", result.stderr), result.stderr


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            "[DEFAULT]\nreserved_huge_pages = node:0,size:2048\n",
            "[DEFAULT] reserved_huge_pages = 'node:0,size:2048': count: missing",
        ),
        (
            "[DEFAULT]\nreserved_huge_pages = node:0,size:2048,count:1\n"
            "reserved_huge_pages = node:0,size:3XB,count:1\n",
            "[DEFAULT] reserved_huge_pages = 'node:0,size:3XB,count:1': size: '3XB' is not a "
            "page size",
        ),
        # Well formed, but the demo host (libvirt's test driver) has no NUMA
        # cells: refused before anything is written, as an audit would.
        (
            "[DEFAULT]\nreserved_huge_pages = node:0,size:2MB,count:1\n",
            "[DEFAULT] reserved_huge_pages = 'node:0,size:2048,count:1': node: 0 is not a "
            "NUMA cell of this host (cells: none)",
        ),
        (
            "[DEFAULT]\nreserved_host_cpus = 1\n[compute]\ncpu_dedicated_set = 4\n",
            "[DEFAULT] reserved_host_cpus: 1 cannot be used with [compute] cpu_dedicated_set",
        ),
    ],
)
def test_reserved_huge_pages_and_host_cpus(tmp_path, extra, message):
    conf = write_conf(tmp_path, extra=extra)
    for command in ("audit", "run"):
        result = rtagent("--config-file", str(conf), command)
        assert_one_line_exit_2(result, message)
    assert not (tmp_path / "state").exists()


def test_version_is_the_package_metadata():
    from importlib import metadata

    result = rtagent("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == metadata.version("rtagent")


def test_startup_line_names_version_config_and_node(tmp_path):
    from importlib import metadata

    conf = write_conf(tmp_path)
    result = rtagent("--config-file", str(conf), "audit")
    node = (tmp_path / "state" / "compute_id").read_text().strip()
    expected = (
        f"rtagent {metadata.version('rtagent')} audit: config files {conf}; host "
        f"{socket.gethostname()}; state_path {tmp_path}/state; node {node}"
    )
    assert expected in result.stderr, result.stderr


def test_a_health_port_in_use_is_one_line(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        extra = f"[DEFAULT]\ntransport_url =\n[health]\nport = {port}\n"
        result = rtagent("--config-file", str(write_conf(tmp_path, extra=extra)), "run")
    finally:
        holder.close()
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    expected = f"rtagent: error: [health] port: cannot listen on 127.0.0.1:{port}"
    assert last.startswith(expected), last
