"""The RPC endpoint (API 1.x): validate, call the tracker, translate errors.

Thin on purpose: each public method validates its arguments against its
schema (:mod:`.schemas`), picks the node's tracker, calls one tracker
method and returns a JSON envelope (:mod:`.errors`). Handlers run
concurrently in oslo.messaging's threading executor; the trackers are the
only shared state and serialise themselves with their fair lock.

Every method takes keyword arguments only, declared as ``**args`` so that an
unknown argument reaches the validator (and gets ``rpc.invalid_request``)
instead of failing inside oslo.messaging's dispatcher with a bare TypeError.
"""

import json
import logging
import math
import re
import time
import typing

import jsonschema

from rtagent import jsonbounds
from rtagent.rpc import errors, instance, schemas, status, transport
from rtagent.tracker.model import Flavor

LOG = logging.getLogger(__name__)

# Methods that change accounting: their success is a reason to publish (to
# Placement within a second, and on the message bus).
MUTATIONS = frozenset(
    {
        "instance_claim",
        "abort_instance_claim",
        "update_instance",
        "start_move",
        "finish_move",
        "confirm_move",
        "revert_move",
        "build_failed",
        "build_succeeded",
        "set_disabled",
        "attach_pci_devices",
        "detach_pci_devices",
    }
)


_VALIDATORS = {
    name: jsonbounds.validator_class()(schema) for name, schema in schemas.METHODS.items()
}

_FORBIDDEN = re.compile(f"[{schemas.FORBIDDEN_CHARACTERS}]")


def validate(method, args):
    """Check ``args`` against ``method``'s schema.

    First, whatever the schema: the arguments are an object, nested at most
    :data:`schemas.MAX_ARGUMENTS_DEPTH` deep, with no forbidden character
    (:data:`schemas.FORBIDDEN_CHARACTERS`) in any string or key, no
    non-finite number and nothing the server could not decode; then at most
    :data:`schemas.MAX_ARGUMENTS_BYTES` of JSON; then the schema.

    :raises InvalidRequest: the first problem found, with its path.
    """
    if isinstance(args, errors.Unreadable):
        raise errors.InvalidRequest(method, "", args.reason)
    if not isinstance(args, dict):
        raise errors.InvalidRequest(
            method, "", f"the arguments must be an object, not {type(args).__name__}"
        )
    _check_values(method, args)
    try:
        size = len(json.dumps(args, separators=(",", ":")))
    except (TypeError, ValueError) as exc:
        # Only an in-process caller (the fake transport) can pass such values.
        raise errors.InvalidRequest(method, "", f"not JSON: {exc}") from None
    if size > schemas.MAX_ARGUMENTS_BYTES:
        raise errors.InvalidRequest(
            method, "", f"{size} bytes of arguments, at most {schemas.MAX_ARGUMENTS_BYTES}"
        )
    error = jsonschema.exceptions.best_match(_VALIDATORS[method].iter_errors(args))
    if error is not None:
        path = _path(error.absolute_path)
        if error.validator == "pattern" and error.schema is schemas.UUID:
            reason = f"{error.instance!r} is not a UUID"
        else:
            reason = error.message
        # The offending value can be large; its repr is cut to keep replies small.
        raise errors.InvalidRequest(method, path, _short(reason))


def _check_values(method, args):
    """Depth, characters and numbers of everything in ``args``, without
    recursion (depth is what is being checked), in document order.

    :raises InvalidRequest: at the first bad value, naming its path.
    """
    stack = [(args, (), 1)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > schemas.MAX_ARGUMENTS_DEPTH:
                raise errors.InvalidRequest(
                    method,
                    _path(path),
                    f"nested deeper than {schemas.MAX_ARGUMENTS_DEPTH} levels",
                )
            if isinstance(value, dict):
                for key in value:
                    _check_text(method, (*path, key), key, "key")
                children = [(v, (*path, k), depth + 1) for k, v in value.items()]
            else:
                children = [(v, (*path, i), depth + 1) for i, v in enumerate(value)]
            stack.extend(reversed(children))
        elif isinstance(value, str):
            _check_text(method, path, value, "text")
        elif isinstance(value, float) and not math.isfinite(value):
            raise errors.InvalidRequest(method, _path(path), f"{value} is not a finite number")
        elif isinstance(value, errors.Unreadable):
            raise errors.InvalidRequest(method, _path(path), value.reason)


def _check_text(method, path, text, what):
    found = _FORBIDDEN.search(text)
    if found is not None:
        raise errors.InvalidRequest(
            method,
            _path(path),
            f"the {what} holds U+{ord(found.group()):04X}: control, bidirectional, "
            "separator and surrogate characters are refused",
        )


def _path(parts):
    """``flavor.vcpus``; keys made printable and cut (they come from the caller)."""
    return ".".join(
        _short(status.printable(p), 64) if isinstance(p, str) else str(p) for p in parts
    )


def _short(text, limit=300):
    return text if len(text) <= limit else text[:limit] + "..."


def _flavor(data):
    return Flavor(**data) if data is not None else None


def _states(a):
    """nova's states a claim or move carries (since 1.8), the ones named."""
    return {k: a[k] for k in ("vm_state", "task_state", "os_type") if k in a}


class AgentEndpoint:
    """Serves the API (:data:`transport.API_VERSION`) over an :class:`rtagent.agent.Agent`.

    :param host: ``[DEFAULT] host`` (for ``ping``).
    :param host_ip: ``[DEFAULT] my_ip`` (the compute-node view's host_ip).
    :param on_call: callable(method, code or None, seconds) after each
        call (metrics); ``code`` is None on success.
    :param on_change: callable(node_uuid) after each successful mutation
        that changed the node (notifications, the prompt sync); a repeated
        ``set_disabled`` changes nothing. Must not block.
    :param status_of: callable(tracker) -> status dict for ``get_status``.
    """

    def __init__(self, agent, host, host_ip, *, on_call=None, on_change=None, status_of=None):
        self.target = transport.messaging().Target(version=transport.API_VERSION)
        self._agent = agent
        self._host = host
        self._host_ip = host_ip
        self._on_call = on_call
        self._on_change = on_change
        self._status_of = status_of or (lambda tracker: status.node_status(tracker.snapshot()))

    # -- the API ---------------------------------------------------------

    def ping(self, ctxt, /, **args):
        return self._serve("ping", args, lambda a: self._ping())

    def instance_claim(self, ctxt, /, **args):
        return self._serve("instance_claim", args, self._instance_claim)

    def abort_instance_claim(self, ctxt, /, **args):
        return self._serve(
            "abort_instance_claim",
            args,
            lambda a: {"released": self._node(a).abort_instance_claim(a["instance_uuid"])},
        )

    def update_instance(self, ctxt, /, **args):
        return self._serve("update_instance", args, self._update_instance)

    def start_move(self, ctxt, /, **args):
        return self._serve("start_move", args, self._start_move)

    def finish_move(self, ctxt, /, **args):
        return self._serve("finish_move", args, self._move_step("finish_move"))

    def confirm_move(self, ctxt, /, **args):
        return self._serve("confirm_move", args, self._move_step("confirm_move"))

    def revert_move(self, ctxt, /, **args):
        return self._serve("revert_move", args, self._move_step("revert_move"))

    def build_failed(self, ctxt, /, **args):
        return self._serve("build_failed", args, lambda a: self._node(a).build_failed() or {})

    def build_succeeded(self, ctxt, /, **args):
        return self._serve("build_succeeded", args, lambda a: self._node(a).build_succeeded() or {})

    def set_disabled(self, ctxt, /, **args):
        return self._serve("set_disabled", args, self._set_disabled)

    def attach_pci_devices(self, ctxt, /, **args):
        return self._serve(
            "attach_pci_devices",
            args,
            lambda a: {
                "pci_devices": instance.pci_devices(
                    self._node(a).attach_pci_devices(a["instance_uuid"], a["pci_requests"])
                )
            },
        )

    def detach_pci_devices(self, ctxt, /, **args):
        return self._serve(
            "detach_pci_devices",
            args,
            lambda a: {
                "released": list(
                    self._node(a).detach_pci_devices(a["instance_uuid"], a["addresses"])
                )
            },
        )

    def get_compute_node(self, ctxt, /, **args):
        return self._serve(
            "get_compute_node", args, lambda a: self._node(a).compute_node_view(self._host_ip)
        )

    def get_status(self, ctxt, /, **args):
        return self._serve("get_status", args, lambda a: self._status_of(self._node(a)))

    def get_instance(self, ctxt, /, **args):
        return self._serve(
            "get_instance",
            args,
            lambda a: instance.instance_record(self._node(a).snapshot(), a["instance_uuid"]),
        )

    # -- translation -------------------------------------------------------

    def _ping(self):
        return {"host": self._host, "api_version": transport.API_VERSION}

    def _instance_claim(self, a):
        kwargs = {
            "limits": a.get("limits"),
            "volume_backed": a.get("volume_backed", False),
            "assigned": a.get("assigned"),
            "extra_specs": a.get("extra_specs"),
            "image_properties": a.get("image_properties"),
            "pci_requests": a.get("pci_requests"),
            "running_cpus": a.get("running_cpus"),
            "running_devices": a.get("running_devices"),
            "states": _states(a),
        }
        if "user_id" in a:
            # Standalone mode: claim, then write the allocation ourselves;
            # a refusal by Placement rolls the claim back.
            self._node(a)  # an unknown node_uuid is refused before anything
            claim = self._agent.claim_standalone(
                a["instance_uuid"],
                _flavor(a["flavor"]),
                project_id=a.get("project_id", ""),
                user_id=a["user_id"],
                node_uuid=a.get("node_uuid"),
                **kwargs,
            )
        else:
            claim = self._node(a).instance_claim(
                a["instance_uuid"],
                _flavor(a["flavor"]),
                project_id=a.get("project_id", ""),
                **kwargs,
            )
        return {
            "instance_uuid": claim.instance_uuid,
            "node_uuid": claim.node_uuid,
            "resources": dict(claim.resources),
            "numa": instance.numa_cells(claim.numa),
            "pci_devices": instance.pci_devices(claim.pci_devices),
            # 1.9: the node as the claim left it, so that a caller keeping
            # a compute-node record (nova's tracker) needs no second call.
            "compute_node": self._agent.nodes.get(claim.node_uuid).compute_node_view(self._host_ip),
        }

    def _update_instance(self, a):
        self._node(a).update_instance(
            a["instance_uuid"],
            vm_state=a.get("vm_state"),
            task_state=a.get("task_state"),
            # An explicit null task_state clears it; an absent one keeps it.
            set_task="task_state" in a,
            others={k: a[k] for k in ("os_type", "project_id") if k in a},
        )
        return {}

    def _start_move(self, a):
        tracker = self._node(a)
        recorded = tracker.start_move(
            a["migration_uuid"],
            a["instance_uuid"],
            a["migration_type"],
            source_node=a["source_node"],
            dest_node=a["dest_node"],
            old_flavor=_flavor(a["old_flavor"]),
            new_flavor=_flavor(a.get("new_flavor")),
            volume_backed=a.get("volume_backed", False),
            limits=a.get("limits"),
            assigned=a.get("assigned"),
            extra_specs=a.get("extra_specs"),
            image_properties=a.get("image_properties"),
            pci_requests=a.get("pci_requests"),
            project_id=a.get("project_id", ""),
            states=_states(a),
        )
        return {
            "numa": instance.move_numa_cells(recorded, tracker.node_uuid),
            "pci_devices": instance.move_pci_devices(recorded, tracker.node_uuid),
            # 1.9: as instance_claim's.
            "compute_node": tracker.compute_node_view(self._host_ip),
        }

    def _move_step(self, name):
        def step(a):
            return {"applied": getattr(self._node(a), name)(a["migration_uuid"])}

        return step

    def _set_disabled(self, a):
        tracker = self._node(a)
        reason = (a.get("reason") or "disabled") if a["disabled"] else None
        reply = {"disabled": a["disabled"], "reason": reason}
        # nova's periodic repeats the service's state every minute: a repeat
        # asks for no prompt sync.
        return reply if tracker.set_disabled(reason) else _Unchanged(reply)

    def _node(self, a):
        """The tracker the call names (the primary node by default).

        :raises NodeNotFound: this agent does not report that node.
        """
        node = a.get("node_uuid")
        if node is None:
            return self._agent.tracker
        return self._agent.nodes.get(node.lower())

    # -- the envelope ------------------------------------------------------

    def _refuse(self, method, args):
        """The reply to a call of ``method`` whose arguments are not keyword
        arguments (not an object, or :class:`errors.Unreadable`): the RPC
        server's dispatcher cannot pass them as ``**args``. Always
        ``rpc.invalid_request``, counted like any call."""
        return self._serve(method, args, None)

    def _serve(self, method, args, handler):
        started = time.monotonic()
        code = None
        try:
            validate(method, args)
            args = _lower_uuids(args)
            result = handler(args)
        except Exception as exc:
            reply = errors.reply_for(exc, method)
            code = reply["error"]["code"]
            LOG.info("RPC %s refused (%s): %s", method, code, reply["error"]["message"])
        else:
            changed = method in MUTATIONS and not isinstance(result, _Unchanged)
            if isinstance(result, _Unchanged):
                result = result.reply
            reply = errors.ok(result)
            if changed and self._on_change is not None:
                self._on_change(args.get("node_uuid"))
        if self._on_call is not None:
            self._on_call(method, code, time.monotonic() - started)
        return reply


class _Unchanged(typing.NamedTuple):
    """A mutation's ``reply`` when the call changed nothing (no
    ``on_change``)."""

    reply: dict


_UUID_KEYS = ("instance_uuid", "migration_uuid", "source_node", "dest_node", "node_uuid")


def _lower_uuids(args):
    """Validated UUIDs in canonical lower case (the tracker's keys)."""
    return {
        k: (v.lower() if k in _UUID_KEYS and isinstance(v, str) else v) for k, v in args.items()
    }
