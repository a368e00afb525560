"""The RPC endpoint (API 1.0): validate, call the tracker, translate errors.

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
import time

import jsonschema

from rtagent.rpc import errors, schemas, status, transport
from rtagent.tracker.model import Flavor

LOG = logging.getLogger(__name__)

# Methods that change accounting: their success is a reason to publish.
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
    }
)

_VALIDATORS = {
    name: jsonschema.Draft202012Validator(schema) for name, schema in schemas.METHODS.items()
}


def validate(method, args):
    """Check ``args`` against ``method``'s schema.

    :raises InvalidRequest: the first problem found, with its path.
    """
    try:
        size = len(json.dumps(args, separators=(",", ":")))
    except (TypeError, ValueError) as exc:
        raise errors.InvalidRequest(method, "", f"not JSON: {exc}") from None
    if size > schemas.MAX_ARGUMENTS_BYTES:
        raise errors.InvalidRequest(
            method, "", f"{size} bytes of arguments, at most {schemas.MAX_ARGUMENTS_BYTES}"
        )
    error = jsonschema.exceptions.best_match(_VALIDATORS[method].iter_errors(args))
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "pattern" and error.schema is schemas.UUID:
            reason = f"{error.instance!r} is not a UUID"
        else:
            reason = error.message
        # The offending value can be large; its repr is cut to keep replies small.
        raise errors.InvalidRequest(method, path, _short(reason))


def _short(text, limit=300):
    return text if len(text) <= limit else text[:limit] + "..."


def _flavor(data):
    return Flavor(**data) if data is not None else None


class AgentEndpoint:
    """Serves API 1.0 over an :class:`rtagent.agent.Agent`.

    :param host: ``[DEFAULT] host`` (for ``ping``).
    :param host_ip: ``[DEFAULT] my_ip`` (the compute-node view's host_ip).
    :param on_call: callable(method, code or None, seconds) after each
        call (metrics); ``code`` is None on success.
    :param on_change: callable(node_uuid) after each successful mutation
        (notifications). Must not block.
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

    def get_compute_node(self, ctxt, /, **args):
        return self._serve(
            "get_compute_node", args, lambda a: self._node(a).compute_node_view(self._host_ip)
        )

    def get_status(self, ctxt, /, **args):
        return self._serve("get_status", args, lambda a: self._status_of(self._node(a)))

    # -- translation -------------------------------------------------------

    def _ping(self):
        return {"host": self._host, "api_version": transport.API_VERSION}

    def _instance_claim(self, a):
        kwargs = {
            "limits": a.get("limits"),
            "volume_backed": a.get("volume_backed", False),
            "assigned": a.get("assigned"),
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
        }

    def _update_instance(self, a):
        self._node(a).update_instance(
            a["instance_uuid"],
            vm_state=a.get("vm_state"),
            task_state=a.get("task_state"),
            # An explicit null task_state clears it; an absent one keeps it.
            set_task="task_state" in a,
        )
        return {}

    def _start_move(self, a):
        self._node(a).start_move(
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
        )
        return {}

    def _move_step(self, name):
        def step(a):
            return {"applied": getattr(self._node(a), name)(a["migration_uuid"])}

        return step

    def _set_disabled(self, a):
        tracker = self._node(a)
        reason = (a.get("reason") or "disabled") if a["disabled"] else None
        tracker.set_disabled(reason)
        return {"disabled": a["disabled"], "reason": reason}

    def _node(self, a):
        """The tracker the call names (the primary node by default).

        :raises NodeNotFound: this agent does not report that node.
        """
        node = a.get("node_uuid")
        if node is None:
            return self._agent.tracker
        return self._agent.nodes.get(node.lower())

    # -- the envelope ------------------------------------------------------

    def _serve(self, method, args, handler):
        started = time.monotonic()
        code = None
        try:
            validate(method, args)
            args = _lower_uuids(args)
            reply = errors.ok(handler(args))
        except Exception as exc:
            reply = errors.reply_for(exc, method)
            code = reply["error"]["code"]
            LOG.info("RPC %s refused (%s): %s", method, code, reply["error"]["message"])
        else:
            if method in MUTATIONS and self._on_change is not None:
                self._on_change(args.get("node_uuid"))
        if self._on_call is not None:
            self._on_call(method, code, time.monotonic() - started)
        return reply


_UUID_KEYS = ("instance_uuid", "migration_uuid", "source_node", "dest_node", "node_uuid")


def _lower_uuids(args):
    """Validated UUIDs in canonical lower case (the tracker's keys)."""
    return {
        k: (v.lower() if k in _UUID_KEYS and isinstance(v, str) else v) for k, v in args.items()
    }
