"""Text rtagent does not choose, shown safely: the escape functions
(rtagent.excerpt), log lines through oslo.log's own formatters wrapped by
rtagent.logs.escape, and RPC error replies (rtagent.rpc.errors)."""

import io
import logging

import pytest
from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_log import formatters, handlers
from oslo_log import log as oslo_log

from rtagent.excerpt import clip, escaped, escaped_tree, printable
from rtagent.logs import escape
from rtagent.pci import errors as pci_errors
from rtagent.rpc import errors
from rtagent.rpc import status as rpc_status

# Every character the issue names, and what it reads as once escaped.
HOSTILE = [
    ("\x00", "\\x00"),
    ("\x1b", "\\x1b"),
    ("\t", "\\t"),
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\x7f", "\\x7f"),
    ("\x85", "\\x85"),
    ("\x9b", "\\x9b"),
    ("\u061c", "\\u061c"),
    ("\u200e", "\\u200e"),
    ("\u200f", "\\u200f"),
    ("\u202a", "\\u202a"),
    ("\u202e", "\\u202e"),
    ("\u2066", "\\u2066"),
    ("\u2069", "\\u2069"),
    ("\u2028", "\\u2028"),
    ("\u2029", "\\u2029"),
    ("\ud800", "\\ud800"),
    ("\udfff", "\\udfff"),
]


@pytest.mark.parametrize("char, shown", HOSTILE, ids=[repr(c) for c, _ in HOSTILE])
def test_each_control_is_written_as_its_escape(char, shown):
    assert escaped(f"a{char}b") == f"a{shown}b"
    assert printable(f"a{char}b") == f"a{shown}b"
    assert clip(f"a{char}b") == f"a{shown}b"


@pytest.mark.parametrize(
    "text",
    ["nic", "r\u00e9seau \u00e9t\u00e9", "\u4e2d\u6587", "a b", "C:\\path", "'quoted'", ""],
)
def test_printable_text_is_kept(text):
    assert escaped(text) == text


def test_escaping_twice_changes_nothing():
    # A message quoting a value already escaped (or repr()ed) is escaped
    # again where it is written: no backslash doubles.
    text = "alias 'nic\u202e\\n' and\nmore\x1b[2J"
    once = escaped(text)
    assert once == "alias 'nic\\u202e\\n' and\\nmore\\x1b[2J"
    assert escaped(once) == once
    assert escaped(repr("x\u202e")) == repr("x\u202e")


def test_printable_doubles_backslashes_so_status_reads_back():
    assert printable("a\\u202e") == "a\\\\u202e"
    assert printable("a\u202e") == "a\\u202e"
    assert printable(3) == "3"


def test_trees_escape_keys_and_values_and_keep_other_types():
    value = {"k\n": ["v\u202e", 1, None, {"x": ("y\x1b",)}], "n": 2.5}
    assert escaped_tree(value) == {"k\\n": ["v\\u202e", 1, None, {"x": ["y\\x1b"]}], "n": 2.5}
    assert rpc_status.printable_tree({"a\\": "b\n"}) == {"a\\\\": "b\\n"}


# -- log lines ----------------------------------------------------------------


def log_conf(**overrides):
    conf = cfg.ConfigOpts()
    oslo_log.register_options(conf)
    conf([], project="rtagent", default_config_files=[])
    for name, value in overrides.items():
        conf.set_override(name, value)
    return conf


@pytest.fixture(autouse=True)
def no_request_context(monkeypatch):
    """oslo.log formats a record with the thread's stored request context
    when there is one; one an earlier test left (Placement's fixture does)
    must not change the lines checked here."""
    monkeypatch.setattr(oslo_context._request_store, "context", None, raising=False)


def logged(formatter, log, handler_class=logging.StreamHandler):
    """What ``log(logger)`` writes through a handler whose formatter is
    ``formatter`` wrapped the way rtagent wraps it."""
    stream = io.StringIO()
    handler = handler_class(stream)
    handler.setFormatter(escape.EscapingFormatter(formatter))
    logger = logging.getLogger("rtagent.test_escaping")
    logger.addHandler(handler)
    logger.propagate, logger.level = False, logging.DEBUG
    try:
        log(logger)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def context_formatter(conf=None):
    return formatters.ContextFormatter(project="rtagent", config=conf or log_conf())


ALIAS = "nic\u202egnp.exe\n2026-01-01 00:00:00.000 1 ERROR rtagent forged"
ALIAS_SHOWN = "nic\\u202egnp.exe\\n2026-01-01 00:00:00.000 1 ERROR rtagent forged"


def assert_no_raw_controls(text):
    for line in text.split("\n"):
        assert escaped(line) == line, line


def test_a_message_is_one_line_with_its_controls_escaped():
    text = logged(context_formatter(), lambda log: log.warning("alias %s unknown", ALIAS))
    assert text.count("\n") == 1, text
    assert f"WARNING rtagent.test_escaping [-] alias {ALIAS_SHOWN} unknown\n" in text
    assert_no_raw_controls(text)


def test_the_record_other_handlers_get_is_unchanged():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "name %s", (ALIAS,), None)
    escape.EscapingFormatter(logging.Formatter("%(message)s")).format(record)
    assert record.getMessage() == f"name {ALIAS}"


def test_a_traceback_keeps_its_lines_and_escapes_within_them():
    def log(logger):
        try:
            raise ValueError(f"libvirt says {ALIAS}")
        except ValueError:
            logger.exception("call %s failed", "get\u202eStatus")

    text = logged(context_formatter(), log)
    lines = text.split("\n")
    # The record's line, with oslo.log's summary of the exception: one line.
    assert lines[0].endswith(
        f"ERROR rtagent.test_escaping [-] call get\\u202eStatus failed: "
        f"ValueError: libvirt says {ALIAS_SHOWN}"
    ), lines[0]
    # The traceback: a line per frame and source line, each with oslo.log's
    # prefix; the exception's own line break stays inside it.
    assert lines[1].endswith("ERROR rtagent.test_escaping Traceback (most recent call last):")
    assert any(line.endswith(", in log") for line in lines)
    assert any(
        line.endswith("ERROR rtagent.test_escaping ValueError: libvirt says nic\\u202egnp.exe")
        for line in lines
    ), text
    framed = [line for line in lines[1:] if line]
    assert all(" ERROR rtagent.test_escaping " in line for line in framed), text
    assert_no_raw_controls(text)


def test_the_summary_of_an_exception_being_handled_is_escaped():
    class LibvirtError(Exception):
        pass

    def log(logger):
        try:
            raise LibvirtError("internal error: domain 'vm\u202e1'\nfailed")
        except LibvirtError:
            logger.warning("Setting up libvirt connection %s: %s", "test:///default", "lost")

    text = logged(context_formatter(), log)
    assert text.count("\n") == 1, text
    assert "LibvirtError: internal error: domain 'vm\\u202e1'\n" in text
    assert_no_raw_controls(text)


def test_a_stack_keeps_its_lines():
    text = logged(context_formatter(), lambda log: log.info("x\u2028y", stack_info=True))
    assert text.split("\n")[0].endswith("[-] x\\u2028y")
    assert text.split("\n")[1] == "Stack (most recent call last):"
    assert_no_raw_controls(text)


def test_a_plain_formatter_from_a_logging_config_file_is_wrapped_too():
    def log(logger):
        try:
            raise KeyError("k\x1b[2J")
        except KeyError:
            logger.error("name %s", ALIAS, exc_info=True)

    text = logged(logging.Formatter("%(levelname)s %(message)s"), log)
    assert text.startswith(f"ERROR name {ALIAS_SHOWN}\nTraceback (most recent call last):\n")
    assert "KeyError: 'k\\x1b[2J'" in text
    assert_no_raw_controls(text)


def test_json_lines_carry_the_escaped_message():
    text = logged(formatters.JSONFormatter(), lambda log: log.info("name %s", ALIAS))
    assert text.count("\n") == 1
    assert '"message": "name nic\\\\u202egnp.exe\\\\n2026' in text


def test_log_color_keeps_its_colour_codes():
    conf = log_conf(
        logging_default_format_string="%(color)s%(levelname)s %(message)s",
    )
    text = logged(
        context_formatter(conf),
        lambda log: log.info("name %s", "a\x1b[31mb"),
        handler_class=handlers.ColorHandler,
    )
    assert text == "\x1b[00;36mINFO name a\\x1b[31mb\x1b[00m\n"


def test_install_wraps_every_handler_once():
    handler = logging.StreamHandler(io.StringIO())
    inner = logging.Formatter("%(message)s")
    handler.setFormatter(inner)
    logger = logging.getLogger("rtagent.test_escaping.install")
    logger.addHandler(handler)
    try:
        escape.install()
        escape.install()
    finally:
        logger.removeHandler(handler)
    assert isinstance(handler.formatter, escape.EscapingFormatter)
    assert handler.formatter.inner is inner


# -- RPC error replies -----------------------------------------------------------


def test_an_error_reply_has_its_message_and_details_escaped():
    # As requests.parse words it: the configured names are not the caller's.
    exc = pci_errors.InvalidRequest(
        f"unknown alias 'nope' (the node's [pci] alias: {ALIAS})", "pci_requests.0.alias"
    )
    reply = errors.reply_for(exc, "instance_claim")
    assert reply["error"]["message"] == (
        f"PCI request: pci_requests.0.alias: unknown alias 'nope' "
        f"(the node's [pci] alias: {ALIAS_SHOWN})"
    )
    reason = pci_errors.DevicesUnavailable(reason=f"request r1 (alias {ALIAS}) needs 1")
    assert errors.reply_for(reason, "instance_claim")["error"]["details"] == {
        "reason": f"request r1 (alias {ALIAS_SHOWN}) needs 1"
    }


def test_an_error_reply_quoting_an_escaped_value_is_not_escaped_twice():
    value = "a\\b"  # repr() writes it 'a\\b', as messages quote values
    exc = errors.InvalidRequest("instance_claim", "flavor", f"{value!r} is not an object")
    assert (
        "'a\\\\b' is not an object" in errors.reply_for(exc, "instance_claim")["error"]["message"]
    )
