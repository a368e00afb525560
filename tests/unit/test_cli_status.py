"""``rtagent status`` as text: times for a person, the last sync, unknown
consumers, health and RPC, from a canned report (pure, no agent)."""

import time

import pytest

from rtagent.cmd.status import _duration, render

NODE = "4f1b2c3d-0000-4000-8000-000000000001"
NOW = 1_800_000_000.0


def report(sync, **top):
    return {
        "host": "cmp1",
        **top,
        "nodes": [
            {
                "node_uuid": NODE,
                "hypervisor_hostname": "cmp1.example",
                "disabled": None,
                "unavailable": None,
                "resources": {},
                "instances": 0,
                "moves": [],
                "drift": {"untracked_domains": [], "missing_instances": []},
                "sync": sync,
                "generated_at": NOW,
            }
        ],
    }


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0.4, "0 s"),
        (59, "59 s"),
        (60, "1 min"),
        (200, "3 min 20 s"),
        (3600 * 2 + 300, "2 h 5 min"),
        (86400 * 3 + 3600 * 4, "3 d 4 h"),
        (-3, "0 s"),
    ],
)
def test_durations_for_a_person(seconds, text):
    assert _duration(seconds) == text


def test_in_sync_says_when_it_last_synced():
    sync = {"in_sync": True, "last_success": NOW - 14, "audits": 12, "unknown_consumers": {}}
    text = render(report(sync))
    local = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(NOW - 14))
    assert f"  placement: in sync; last sync 14 s ago ({local}); 12 audit(s)" in text
    assert "  unknown consumers: none" in text


def test_not_in_sync_gives_the_error_and_the_age_of_the_last_sync():
    sync = {
        "in_sync": False,
        "last_success": NOW - 3700,
        "last_error": "placement.unavailable: Placement is unavailable",
        "audits": 70,
    }
    lines = render(report(sync)).splitlines()
    i = lines.index("  placement: NOT in sync: placement.unavailable: Placement is unavailable")
    assert lines[i + 1].startswith("    last sync 1 h 1 min ago (")


def test_never_synced():
    text = render(report({"in_sync": False, "last_success": None, "audits": 0}))
    assert "  placement: NOT in sync: no sync yet" in text
    assert "    last sync never; 0 audit(s)" in text


def test_unknown_consumers_are_counted_and_listed():
    consumers = [f"c0000000-0000-4000-8000-{i:012d}" for i in range(12)]
    sync = {
        "in_sync": True,
        "last_success": NOW,
        "unknown_consumers": {NODE: 12},
        "placement": {"unknown_consumers": consumers},
        "healing_backlog": {NODE: 40},
    }
    text = render(report(sync))
    assert "  unknown consumers: 12 (allocations on this node that no claim" in text
    assert f"    unknown {consumers[9]}" in text
    assert f"    unknown {consumers[10]}" not in text
    assert "    ... and 2 more (--json lists them all)" in text
    assert "  healing backlog: 40 released consumer(s) left for the next audit" in text


@pytest.mark.parametrize(
    "due, line",
    [
        (NOW + 252, "  next read of Placement (for changes made by others): in 4 min 12 s"),
        (NOW - 1, "  next read of Placement (for changes made by others): at the next audit"),
        (None, None),
    ],
)
def test_when_placement_is_read_next(due, line):
    sync = {"in_sync": True, "last_success": NOW, "placement": {"next_placement_read": due}}
    text = render(report(sync))
    if line is None:
        assert "next read of Placement" not in text
    else:
        assert line in text


def test_unknown_consumers_from_the_count_alone():
    text = render(report({"in_sync": True, "last_success": NOW, "unknown_consumers": {NODE: 3}}))
    assert "  unknown consumers: 3 (" in text


def test_health_and_rpc_lines():
    text = render(
        report(
            {"in_sync": True, "last_success": NOW},
            healthy=False,
            problems=["starting", "RPC server not running: AccessRefused: denied"],
            rpc={
                "enabled": True,
                "running": False,
                "attempts": 3,
                "retry_in": 8.0,
                "last_error": "AccessRefused: denied",
            },
        )
    )
    assert "  health: UNHEALTHY: starting; RPC server not running: AccessRefused: denied" in text
    assert "  rpc: NOT serving (3 attempt(s), next in 8 s): AccessRefused: denied" in text
    ok = render(report({}, healthy=True, problems=[], rpc={"enabled": False}))
    assert "  health: ok" in ok
    assert "  rpc: off (no [DEFAULT] transport_url)" in ok


def test_control_characters_never_reach_the_terminal():
    sync = {"in_sync": False, "last_error": "bad\x1b[2Jthing", "last_success": None}
    assert "\x1b" not in render(report(sync))


@pytest.mark.parametrize(
    "bind, url",
    [
        ("127.0.0.1", "http://127.0.0.1:8787/status"),
        ("0.0.0.0", "http://127.0.0.1:8787/status"),
        ("::", "http://127.0.0.1:8787/status"),
        ("10.0.0.5", "http://10.0.0.5:8787/status"),
        ("fd00::5", "http://[fd00::5]:8787/status"),
    ],
)
def test_status_asks_where_the_agent_listens(bind, url):
    from rtagent import conf as rtconf
    from rtagent.cmd.status import status_url

    conf = rtconf.new_conf()
    conf([], default_config_files=[])
    conf.set_override("bind_address", bind, group="health")
    conf.set_override("port", 8787, group="health")
    assert status_url(conf) == url
