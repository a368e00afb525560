"""Hostile RPC calls over a real RabbitMQ (issue 11, item 6).

The caller here is not rtagent's client: it speaks oslo.messaging's wire
format with kombu alone and sends whatever JSON text it likes, as a caller
in another language (or a hostile one) can: nesting too deep for Python's
decoder, NaN, lone surrogates, odd versions and method names. Every such
call must get a reply (no timeout), every refusal of arguments must be
``rpc.invalid_request`` naming the path, and no reply may carry a server
traceback. The agent is served in this process (tests/functional/rpc/
harness.py) on the libvirt test driver with a real Placement process.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import kombu
import pytest

from rtagent.testing.placement_server import PlacementServer
from tests.functional.rpc.harness import ServedAgent, make_conf

pytestmark = pytest.mark.integration

REPLY_S = 15
RTAGENT = os.path.join(os.path.dirname(sys.executable), "rtagent")
HOST = "hostile-rpc-host"


@pytest.fixture(scope="module")
def placement():
    with PlacementServer(db_sync=False) as server:
        yield server


@pytest.fixture(scope="module")
def agent(broker, placement, tmp_path_factory):
    conf = make_conf(str(tmp_path_factory.mktemp("hostile")), broker.transport_url, host=HOST)
    served = ServedAgent(conf, placement.endpoint)
    yield served
    served.stop()


class RawCaller:
    """oslo.messaging's RPC wire format (envelope 2.0) spoken with kombu.

    A call is a JSON text published to the ``rtagent`` topic exchange with
    routing key ``rtagent.<host>``; the reply comes to a queue of ours named
    in ``_reply_q``, through the default exchange.
    """

    def __init__(self, port, host):
        self.conn = kombu.Connection(f"amqp://guest:guest@127.0.0.1:{port}//")
        self.channel = self.conn.channel()
        self.reply_q = f"raw_reply_{uuid.uuid4().hex}"
        self.queue = kombu.Queue(
            self.reply_q, exclusive=True, auto_delete=True, durable=False, channel=self.channel
        )
        self.queue.declare()
        self.producer = kombu.Producer(self.channel)
        self.routing_key = f"rtagent.{host}"

    def close(self):
        self.conn.release()

    def call_text(self, text_of, timeout=REPLY_S):
        """Send the message ``text_of(msg_id, reply_q)`` (a JSON text) and
        return the decoded reply ``{"result": ..., "failure": ...}``.

        :raises TimeoutError: no reply within ``timeout`` seconds.
        """
        msg_id = uuid.uuid4().hex
        body = json.dumps({"oslo.version": "2.0", "oslo.message": text_of(msg_id, self.reply_q)})
        self.producer.publish(
            body,
            exchange="rtagent",
            routing_key=self.routing_key,
            content_type="application/json",
            content_encoding="utf-8",
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.queue.get(no_ack=True)
            if message is None:
                time.sleep(0.02)
                continue
            reply = json.loads(json.loads(message.body)["oslo.message"])
            if reply.get("_msg_id") != msg_id:
                continue  # a stale reply (of a call that timed out)
            if reply.get("failure"):
                reply["failure"] = json.loads(reply["failure"])
            return reply
        raise TimeoutError(f"no reply within {timeout} s")

    def call(self, method, args_text, version='"1.1"', extra=""):
        """A call whose ``method``, ``args`` and ``version`` are JSON texts."""

        def text_of(msg_id, reply_q):
            return (
                f'{{"method": {method}, "args": {args_text}, "namespace": null, '
                f'"version": {version}, "_msg_id": "{msg_id}", "_reply_q": "{reply_q}", '
                f'"_timeout": {REPLY_S}, "_unique_id": "{uuid.uuid4().hex}"{extra}}}'
            )

        return self.call_text(text_of)


@pytest.fixture(scope="module")
def raw(broker, agent):
    caller = RawCaller(broker.port, HOST)
    yield caller
    caller.close()


def state_of(agent):
    snap = agent.agent.tracker.snapshot()
    return (snap.instances, snap.migrations, snap.disabled, dict(snap.usage))


def refused(raw, agent, method, args_text, path_prefix):
    """Call; assert rpc.invalid_request naming a path under ``path_prefix``
    and that nothing changed. :returns: the error."""
    before = state_of(agent)
    reply = raw.call(json.dumps(method), args_text)
    assert reply["failure"] is None, reply["failure"]
    result = reply["result"]
    if result["ok"]:
        undo(raw, agent, method, result["result"])
    assert result["ok"] is False, result
    error = result["error"]
    assert error["code"] == "rpc.invalid_request", error
    assert error["details"]["path"].startswith(path_prefix), error
    assert state_of(agent) == before
    return error


def undo(raw, agent, method, result):
    """Undo a call that should have been refused (so that one such call
    does not make the next tests fail for another reason: a full node)."""
    if method == "instance_claim":
        raw.call('"abort_instance_claim"', json.dumps({"instance_uuid": result["instance_uuid"]}))
    elif method == "set_disabled":
        raw.call('"set_disabled"', '{"disabled": false}')


def new_uuid():
    return str(uuid.uuid4())


def claim_args(**extra):
    args = {"instance_uuid": new_uuid(), "flavor": {"vcpus": 1, "memory_mb": 64}}
    args.update(extra)
    return args


def test_a_well_formed_raw_call_is_served(raw, agent):
    # The raw caller itself is right: a valid call succeeds.
    reply = raw.call('"ping"', "{}")
    assert reply["result"] == {"ok": True, "result": {"host": HOST, "api_version": "1.9"}}


# -- nesting ---------------------------------------------------------------


def _nested(depth):
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [40, 900, 3000, 200_000])
def test_deep_nesting_gets_a_refusal_naming_the_path(raw, agent, depth):
    """3,000 levels cannot even be decoded by Python's json (RecursionError
    in the server's consumer): before, the message was dropped and the
    caller timed out."""
    text = json.dumps(claim_args(limits={"numa_topology": {"cells": None}}))
    text = text.replace('"cells": null', f'"cells": {_nested(depth)}')
    error = refused(raw, agent, "instance_claim", text, "limits.numa_topology.cells")
    assert "nested deeper than" in error["message"]


def test_deep_nesting_in_the_context_is_decoded_and_ignored(raw, agent):
    # The context is not ours to check, but it must not make the call vanish.
    reply = raw.call('"ping"', "{}", extra=f', "_context_junk": {_nested(3000)}')
    assert reply["result"]["ok"] is True, reply


def test_an_oversized_message_is_refused_before_it_is_decoded(raw, agent):
    # 2 MiB of small numbers (about 20 MB of Python objects once decoded).
    text = json.dumps(claim_args(limits={"numa_topology": {"cells": [1] * (1024 * 1024)}}))
    error = refused(raw, agent, "instance_claim", text, "")
    assert "message of" in error["message"] and "at most" in error["message"], error


def test_an_oversized_message_gets_a_reply_even_if_it_is_not_json(raw, agent):
    # Decoding it would fail (a trailing comma): the reply proves it was not
    # decoded. Before, the decoder's ValueError dropped it: no reply.
    text = json.dumps(claim_args(limits={"numa_topology": {"cells": [1] * (1024 * 1024)}}))
    text = text.replace("1]", "1,]")
    error = refused(raw, agent, "instance_claim", text, "")
    assert "message of" in error["message"], error


def test_an_integer_beyond_python_digits_limit_gets_a_refusal(raw, agent):
    # json.loads raises ValueError past 4,300 digits: the message was dropped.
    text = json.dumps(claim_args(limits={"numa_topology": {"n": 0}}))
    text = text.replace('"n": 0', '"n": ' + "9" * 5000)
    refused(raw, agent, "instance_claim", text, "limits.numa_topology.n")


# -- text fields -------------------------------------------------------------

NODE = "0b1e4c6e-8f49-4f0c-9d5e-1f2a3b4c5d6e"
MIG = "1b1e4c6e-8f49-4f0c-9d5e-1f2a3b4c5d6e"


def _text_fields():
    """(method, args, path) for every text argument of the API."""
    flavor = {"vcpus": 1, "memory_mb": 64}
    move = {
        "migration_uuid": MIG,
        "instance_uuid": NODE,
        "migration_type": "resize",
        "source_node": NODE,
        "dest_node": NODE,
        "old_flavor": flavor,
    }

    def claim(**kw):
        return {"instance_uuid": NODE, "flavor": dict(flavor), **kw}

    return [
        ("instance_claim", claim(), "instance_uuid"),
        ("instance_claim", claim(node_uuid=NODE), "node_uuid"),
        ("instance_claim", claim(flavor={**flavor, "name": "m1.small"}), "flavor.name"),
        ("instance_claim", claim(project_id="p"), "project_id"),
        ("instance_claim", claim(user_id="u", project_id="p"), "user_id"),
        ("instance_claim", claim(assigned={"CUSTOM_GPU": 1}), "assigned.CUSTOM_GPU"),
        ("update_instance", {"instance_uuid": NODE, "task_state": "spawning"}, "task_state"),
        ("start_move", dict(move), "migration_uuid"),
        ("start_move", dict(move), "source_node"),
        ("start_move", dict(move), "dest_node"),
        ("start_move", {**move, "new_flavor": {**flavor, "name": "m1"}}, "new_flavor.name"),
        ("finish_move", {"migration_uuid": MIG}, "migration_uuid"),
        ("set_disabled", {"disabled": True, "reason": "maintenance"}, "reason"),
        ("get_status", {"node_uuid": NODE}, "node_uuid"),
    ]


def _with(args, path, transform):
    """A copy of ``args`` with the text (or, for ``assigned``, the key) at
    ``path`` transformed."""
    args = json.loads(json.dumps(args))
    *parents, last = path.split(".")
    holder = args
    for key in parents:
        holder = holder[key]
    if parents == ["assigned"]:
        holder[transform(last)] = holder.pop(last)
    else:
        holder[last] = transform(holder[last])
    return args


TEXT_FIELDS = _text_fields()
TEXT_IDS = [f"{m}:{p}" for m, _, p in TEXT_FIELDS]


@pytest.mark.parametrize("method, args, path", TEXT_FIELDS, ids=TEXT_IDS)
def test_a_trailing_newline_is_refused_in_every_text_field(raw, agent, method, args, path):
    bad = _with(args, path, lambda text: text + "\n")
    # A bad key is named by its parent's path plus the key, escaped.
    error = refused(raw, agent, method, json.dumps(bad), path)
    assert "\n" not in error["details"]["path"], error


BAD_CHARACTERS = {
    "c1-nel": "\u0085",
    "c1-csi": "\u009b",
    "bidi-rlo": "\u202e",
    "bidi-rli": "\u2067",
    "bidi-alm": "\u061c",
    "lone-surrogate": "\ud800",
    "line-separator": "\u2028",
}


@pytest.mark.parametrize("char", list(BAD_CHARACTERS.values()), ids=list(BAD_CHARACTERS))
@pytest.mark.parametrize(
    "method, args, path",
    [
        (
            "instance_claim",
            claim_args(flavor={"vcpus": 1, "memory_mb": 64, "name": "m1"}),
            "flavor.name",
        ),
        ("instance_claim", claim_args(project_id="p"), "project_id"),
        ("set_disabled", {"disabled": True, "reason": "maintenance"}, "reason"),
        (
            "instance_claim",
            claim_args(limits={"numa_topology": {"k": "v"}}),
            "limits.numa_topology.k",
        ),
    ],
    ids=["flavor.name", "project_id", "reason", "numa_topology"],
)
def test_controls_bidi_and_surrogates_are_refused(raw, agent, char, method, args, path):
    bad = _with(args, path, lambda text: "a" + char + "b")
    # json.dumps escapes it (\\ud800): the wire carries what any caller can send.
    error = refused(raw, agent, method, json.dumps(bad), path)
    assert error["details"]["path"] == path


def test_a_bad_character_in_a_key_is_named_escaped(raw, agent):
    args = claim_args(limits={"numa_topology": {"x\u202e\n": 1}})
    error = refused(raw, agent, "instance_claim", json.dumps(args), "limits.numa_topology")
    assert "\u202e" not in json.dumps(error, ensure_ascii=False)
    assert "\n" not in error["details"]["path"]


# -- numbers -----------------------------------------------------------------


@pytest.mark.parametrize(
    "template, path",
    [
        ('{"vcpu": %s}', "limits.vcpu"),
        ('{"memory_mb": %s}', "limits.memory_mb"),
        ('{"disk_gb": %s}', "limits.disk_gb"),
        ('{"numa_topology": {"x": %s}}', "limits.numa_topology.x"),
    ],
    ids=["vcpu", "memory_mb", "disk_gb", "numa_topology"],
)
def test_non_finite_limits_are_invalid_requests(raw, agent, template, path):
    # (Infinity and 1e400 were refused before by the schema's maximum; NaN
    # compares false with any bound and was not.)
    for number in ("NaN", "Infinity", "-Infinity", "1e400"):
        text = json.dumps(claim_args(limits={})).replace(
            '"limits": {}', '"limits": ' + template % number
        )
        error = refused(raw, agent, "instance_claim", text, path)
        assert error["details"]["path"] == path, (number, error)


@pytest.mark.parametrize(
    "args, path",
    [
        (claim_args(flavor={"vcpus": 2.0, "memory_mb": 64}), "flavor.vcpus"),
        (claim_args(flavor={"vcpus": 1, "memory_mb": 512.0}), "flavor.memory_mb"),
        (claim_args(flavor={"vcpus": 1, "memory_mb": 64, "root_gb": 1.0}), "flavor.root_gb"),
        (claim_args(assigned={"CUSTOM_GPU": 1.0}), "assigned.CUSTOM_GPU"),
    ],
    ids=["vcpus", "memory_mb", "root_gb", "assigned"],
)
def test_integral_floats_are_not_integers(raw, agent, args, path):
    error = refused(raw, agent, "instance_claim", json.dumps(args), path)
    assert error["details"]["path"] == path


# -- what oslo.messaging sees before the endpoint ------------------------------


def _assert_no_traceback(failure):
    text = json.dumps(failure)
    assert "Traceback" not in text and 'File \\"' not in text and ".py" not in text, failure


@pytest.mark.parametrize(
    "method",
    [
        '"target"',
        '"_serve"',
        '"_node"',
        '"__init__"',
        '"_agent"',
        '"no_such_method"',
        "null",
        "7",
        '["ping"]',
        '"' + "m" * 5000 + '"',
    ],
)
def test_unknown_names_get_nosuchmethod_without_a_traceback(raw, agent, method):
    before = state_of(agent)
    reply = raw.call(method, "{}")
    failure = reply["failure"]
    assert failure is not None and failure["class"] == "NoSuchMethod", reply
    _assert_no_traceback(failure)
    assert len(failure["message"]) < 300
    assert state_of(agent) == before


@pytest.mark.parametrize(
    "version",
    [
        '"1"',
        '"1.1a"',
        '""',
        '"2.0"',
        '"1.10"',
        '" 1.0"',
        '"1.0.0.0"',
        '"\u0661.0"',
        "1.1",
        "null",
        '["1.0"]',
    ],
)
def test_odd_versions_get_unsupportedversion_without_a_traceback(raw, agent, version):
    reply = raw.call('"ping"', "{}", version=version)
    failure = reply["failure"]
    assert failure is not None and failure["class"] == "UnsupportedVersion", reply
    _assert_no_traceback(failure)


@pytest.mark.parametrize(
    "version",
    [
        '"1.0"',
        '"1.1"',
        '"1.2"',
        '"1.3"',
        '"1.4"',
        '"1.5"',
        '"1.6"',
        '"1.7"',
        '"1.8"',
        '"1.9"',
        '"1.0.5"',
    ],
)
def test_supported_versions_are_served(raw, agent, version):
    assert raw.call('"ping"', "{}", version=version)["result"]["ok"] is True


@pytest.mark.parametrize("args_text", ["[1, 2]", '"x"', "7", "null"])
def test_arguments_that_are_not_an_object_are_invalid_requests(raw, agent, args_text):
    refused(raw, agent, "instance_claim", args_text, "")


# -- rtagent status ------------------------------------------------------------


def test_status_prints_control_characters_escaped(agent, broker, tmp_path):
    """A reason recorded before validation refused such text (or a hostname
    from a hostile hypervisor) is shown escaped, never sent to the terminal."""
    tracker = agent.agent.tracker
    reason = "evil\x1b]0;owned\x07\x1b[2J\u202egnp.exe\x85\nfake line"
    tracker.set_disabled(reason)
    conf = tmp_path / "status.conf"
    conf.write_text(
        f"[DEFAULT]\nhost = {HOST}\ntransport_url = {broker.transport_url}\n"
        "[health]\nenabled = false\n"
    )
    try:
        out = subprocess.run(
            [RTAGENT, "--config-file", str(conf), "status"],
            capture_output=True,
            check=False,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ),
        )
    finally:
        tracker.set_disabled(None)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    text = out.stdout.decode("utf-8")
    for char in ("\x1b", "\x07", "\u202e", "\x85"):
        assert char not in text, repr(text)
    assert "fake line" in text and "\nfake line" not in text
    assert "\\x1b]0;owned\\x07\\x1b[2J\\u202egnp.exe\\x85\\nfake line" in text, text
