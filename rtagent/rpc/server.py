"""The RPC server: topic ``rtagent``, server name ``[DEFAULT] host``.

oslo.messaging's threading executor runs up to
``[DEFAULT] executor_thread_pool_size`` handlers at once (64 by default).

Whatever a caller sends, a call gets a reply and no reply carries a server
traceback (docs/rpc-api.md, "Hostile input"):

- The raw message (oslo.messaging's JSON text) is bounded before Python
  decodes it (:func:`install_message_guard`): one longer than
  :data:`schemas.MAX_MESSAGE_CHARS` is not decoded at all, nesting deeper
  than Python's decoder can take is cut at :data:`schemas.MAX_MESSAGE_DEPTH`,
  an integer longer than ``int()`` takes is replaced by a marker. Before,
  such a message was dropped by the driver and the caller timed out; now
  the endpoint's validation refuses it with ``rpc.invalid_request``.
- The dispatcher serves only the API's methods and well-formed versions;
  anything else gets oslo.messaging's ``NoSuchMethod`` or
  ``UnsupportedVersion`` without the traceback oslo.messaging would attach
  (its own dispatcher calls any public attribute, ``target`` included, and
  parses versions with ``int()``).
"""

import json
import logging
import re
import sys
import threading
import time

from rtagent.logs import context
from rtagent.rpc import errors, schemas, transport
from rtagent.rpc.status import printable

LOG = logging.getLogger(__name__)

# "1.0", "1.1", "1.0.3": what oslo.messaging's version check can parse.
_VERSION = re.compile(r"([0-9]{1,6})\.([0-9]{1,6})(?:\.([0-9]{1,6}))?", re.ASCII)

# The key under which the message guard marks a message it refused to decode.
REFUSED = "rtagent.refused"


class RPCServer:
    """Start and stop serving ``endpoint`` for ``host``.

    :param rpc_transport: an oslo.messaging RPC transport (owned by the caller).
    """

    def __init__(self, rpc_transport, host, endpoint):
        om = transport.messaging()
        install_message_guard()
        self.host = host
        self._server = om.rpc.server.RPCServer(
            rpc_transport, transport.server_target(host), _dispatcher_class()(endpoint)
        )
        self.running = False

    def start(self):
        self._server.start()
        self.running = True
        LOG.info(
            "Serving RPC API %s on topic %s, server %s",
            transport.API_VERSION,
            transport.TOPIC,
            self.host,
        )

    def stop(self):
        """Stop taking calls, then wait for the calls in flight to finish.

        :returns: seconds it took.
        """
        if not self.running:
            return 0.0
        started = time.monotonic()
        self._server.stop()
        self._server.wait()
        self.running = False
        seconds = time.monotonic() - started
        LOG.info("RPC server stopped in %.1f s", seconds)
        return seconds


# -- the dispatcher --------------------------------------------------------

_classes = {}
_classes_lock = threading.Lock()


def _dispatcher_class():
    """The dispatcher class (made once: oslo_messaging is imported lazily)."""
    with _classes_lock:
        if "dispatcher" not in _classes:
            _classes["dispatcher"] = _make_dispatcher_class(transport.messaging())
    return _classes["dispatcher"]


def _make_dispatcher_class(om):
    class APIAccessPolicy(om.RPCAccessPolicyBase):
        """Only the API's methods, never another attribute of the endpoint."""

        def is_allowed(self, endpoint, method):
            return method in schemas.METHODS

    class Dispatcher(om.RPCDispatcher):
        """oslo.messaging's RPC dispatcher for one :class:`AgentEndpoint`,
        with the method, version and arguments checked first."""

        def __init__(self, endpoint):
            super().__init__([endpoint], None, APIAccessPolicy)
            self._endpoint = endpoint

        def dispatch(self, incoming):
            # Every log line of this call carries the caller's request id.
            context.adopt(incoming.ctxt)
            message = incoming.message
            method = message.get("method")
            if not isinstance(method, str) or method not in schemas.METHODS:
                shown = _shown(method)
                LOG.info("RPC call refused: no method %s", shown)
                raise _without_traceback(om.NoSuchMethod(shown))
            version = message.get("version", "1.0")
            if message.get("namespace") is not None or not _compatible(version):
                shown = _shown(version)
                LOG.info("RPC %s refused: version %s", method, shown)
                raise _without_traceback(om.UnsupportedVersion(shown, method=method))
            args = message.get("args", {})
            if isinstance(message.get(REFUSED), errors.Unreadable):
                args = message[REFUSED]
            try:
                if not isinstance(args, dict):
                    return self._endpoint._refuse(method, args)
                return super().dispatch(incoming)
            # Neither is expected after the checks above; never with a traceback.
            except om.NoSuchMethod as exc:
                raise _without_traceback(om.NoSuchMethod(exc.method)) from None
            except om.UnsupportedVersion as exc:
                raise _without_traceback(
                    om.UnsupportedVersion(exc.version, method=exc.method)
                ) from None
            except Exception as exc:
                return errors.reply_for(exc, method)

    def _without_traceback(exc):
        # oslo.messaging sends ExpectedException's exc_info as the failure;
        # without a traceback object, the caller gets the exception's class
        # and message only.
        expected = om.ExpectedException()
        expected.exc_info = (type(exc), exc, None)
        return expected

    return Dispatcher


def _compatible(version):
    """Whether ``version`` ("X.Y" or "X.Y.Z") can be served: same major,
    not newer than :data:`transport.API_VERSION` (oslo.messaging's rule)."""
    found = _VERSION.fullmatch(version) if isinstance(version, str) else None
    if found is None:
        return False
    major, minor, rev = int(found[1]), int(found[2]), int(found[3] or 0)
    our_major, our_minor = (int(p) for p in transport.API_VERSION.split("."))
    return major == our_major and (minor, rev) <= (our_minor, 0)


def _shown(value, limit=64):
    """A caller's value for a message: printable and short."""
    if isinstance(value, str):
        text = printable(value[: limit + 1])
    elif value is None or isinstance(value, (bool, int, float)):
        text = json.dumps(value)
    else:
        text = f"<{type(value).__name__}>"  # maybe nested too deep to print
    return text if len(text) <= limit else text[:limit] + "..."


# -- the raw message guard ---------------------------------------------------

_MESSAGE_KEY = "oslo.message"
_VERSION_KEY = "oslo.version"
_guard_lock = threading.Lock()

# The characters that matter when walking JSON for its nesting: quotes and
# backslashes (strings, where brackets do not count) and brackets. One pass,
# linear in the message: a regex matching whole strings backtracks over an
# unterminated one full of escapes (quadratic: 24 s for 64 KB).
_SPECIAL = re.compile(r'[\\"\[\]{}]')

# The fields a reply needs, found in an oversized message without decoding
# it (the first occurrence: oslo.messaging writes them at the top level).
_FIELDS = {
    name: re.compile(
        rf'"{name}"\s*:\s*("(?:[^"\\]|\\.){{0,255}}"|null|-?[0-9]{{1,12}}(?:\.[0-9]{{1,6}})?)'
    )
    for name in ("method", "version", "namespace", "_msg_id", "_reply_q", "_timeout", "_unique_id")
}


def install_message_guard():
    """Bound every RPC message this process receives before it is decoded.

    oslo.messaging has no hook between the broker and the decoder: its
    RabbitMQ driver calls ``oslo_messaging._drivers.common.deserialize_msg``
    on every message, and a message it cannot decode (RecursionError,
    ValueError) is logged and dropped, so the caller times out. This wraps
    that function, once per process; messages within the bounds are decoded
    by the original, unchanged. Only the agent's process installs it (by
    making an :class:`RPCServer`): it also applies to replies this process
    would receive, and a reply over the size bound would be refused too.
    """
    transport.messaging()
    from oslo_messaging._drivers import common

    with _guard_lock:
        original = common.deserialize_msg
        if getattr(original, "rtagent_guard", False):
            return

        def deserialize_msg(msg):
            return _guarded(msg, original)

        deserialize_msg.rtagent_guard = True
        common.deserialize_msg = deserialize_msg


def _guarded(msg, original):
    raw = msg.get(_MESSAGE_KEY) if isinstance(msg, dict) and _VERSION_KEY in msg else None
    if not isinstance(raw, str):
        return original(msg)
    if len(raw) > schemas.MAX_MESSAGE_CHARS:
        original({**msg, _MESSAGE_KEY: "{}"})  # the envelope's version check
        return _stub(raw)
    try:
        return original(msg)
    except RecursionError as exc:
        failure = exc
    except ValueError as exc:
        if "integer string conversion" not in str(exc):
            raise  # not JSON at all: dropped, as oslo.messaging does
        failure = exc
    # Too deep for Python's decoder, or an integer longer than int() takes.
    try:
        return json.loads(
            _cut_deeper_than(raw, schemas.MAX_MESSAGE_DEPTH), parse_int=_int_or_unreadable
        )
    except (RecursionError, ValueError):
        raise failure from None


def _stub(raw):
    """A message standing for an oversized one: its reply fields, no
    arguments, and the refusal under :data:`REFUSED`."""
    stub = {"args": {}}
    for name, pattern in _FIELDS.items():
        found = pattern.search(raw)
        if found is not None:
            stub[name] = json.loads(found[1])
    stub[REFUSED] = errors.Unreadable(
        f"a message of {len(raw)} characters, at most {schemas.MAX_MESSAGE_CHARS}"
    )
    LOG.info("RPC message of %d characters refused undecoded", len(raw))
    return stub


def _cut_deeper_than(text, limit):
    """``text`` (JSON) with every array or object nested deeper than
    ``limit`` replaced by null. Validation still refuses the arguments: what
    remains is deeper than :data:`schemas.MAX_ARGUMENTS_DEPTH`."""
    out, last, depth, cut_from = [], 0, 0, None
    in_string, escaped_at = False, -1
    for token in _SPECIAL.finditer(text):
        at = token.start()
        if at == escaped_at:
            continue  # the character a backslash escapes
        char = text[at]
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth == limit + 1:
                cut_from = at
        elif char in "]}":
            if depth == limit + 1 and cut_from is not None:
                out.append(text[last:cut_from])
                out.append("null")
                last, cut_from = token.end(), None
            depth -= 1
    out.append(text[last:])
    return "".join(out)


def _int_or_unreadable(digits):
    limit = sys.get_int_max_str_digits()
    if limit and len(digits.lstrip("-")) > limit:
        return errors.Unreadable(f"an integer of {len(digits.lstrip('-'))} digits")
    return int(digits)
