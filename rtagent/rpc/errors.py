"""The RPC error contract: every reply is a plain JSON envelope.

A caller in another codebase matches on ``error.code`` (a stable string,
never changed once published) without importing rtagent and without
``allowed_remote_exmods``::

    {"ok": true,  "result": {...}}
    {"ok": false, "error": {"code": "tracker.compute_resources_unavailable",
                            "message": "...", "retriable": false,
                            "details": {"reasons": ["MEMORY_MB: ..."]}}}
    {"ok": false, "error": {"code": "numa.invalid_constraint", "message": "...",
                            "retriable": false,
                            "details": {"key": "hw:cpu_policy"}}}
    {"ok": false, "error": {"code": "pci.invalid_request", "message": "...",
                            "retriable": false,
                            "details": {"field": "pci_requests.0.alias"}}}

The codes are those of rtagent's exception hierarchy (``RtagentError.code``)
plus the few defined here for the RPC edge itself.

``message`` and the strings of ``details`` are escaped here, for every
reply: the arguments cannot hold controls (the schemas refuse them), but a
message also quotes configuration (``[pci] alias`` names) and libvirt's
error texts, which can. Each character that is not printable is written as
its Python escape (``\\u202e``, ``\\n``), so a message is one line and
shows as it reads (:func:`rtagent.excerpt.escaped`).
"""

import logging

from rtagent import exception
from rtagent.excerpt import escaped, escaped_tree
from rtagent.numa import errors as numa_errors
from rtagent.pci import errors as pci_errors
from rtagent.placement import errors as placement_errors
from rtagent.tracker import errors as tracker_errors

LOG = logging.getLogger(__name__)


class RPCError(exception.RtagentError):
    code = "rpc.error"
    msg_fmt = "RPC error."


class InvalidRequest(RPCError):
    """The arguments do not match the method's schema. Nothing changed.

    ``path`` names the offending argument (``flavor.vcpus``).
    """

    code = "rpc.invalid_request"
    msg_fmt = "Invalid arguments for {method}: {path}: {reason}"

    def __init__(self, method, path, reason):
        self.path = path
        super().__init__(method=method, path=path or "(arguments)", reason=reason)


class Unreadable:
    """Stands for a value the RPC server could not decode as sent (an
    integer longer than Python's int() takes; a whole message over its size
    bound), in place of that value: validation refuses it where it is, with
    ``reason``. A caller cannot send one: JSON has no such type."""

    __slots__ = ("reason",)

    def __init__(self, reason):
        self.reason = reason

    def __repr__(self):
        return f"<unreadable: {self.reason}>"


# Codes a caller may retry later on the same node: the condition passes.
RETRIABLE = frozenset(
    {
        tracker_errors.NodeNotReady.code,
        tracker_errors.HostUnavailable.code,
        tracker_errors.StateError.code,
        tracker_errors.ClaimPending.code,
        placement_errors.PlacementUnavailable.code,
    }
)

INTERNAL_ERROR = "rpc.internal_error"


def ok(result):
    return {"ok": True, "result": result}


def reply_for(exc, method):
    """The error envelope for ``exc`` raised while serving ``method``."""
    if isinstance(exc, exception.RtagentError):
        details = {}
        if isinstance(exc, tracker_errors.ComputeResourcesUnavailable):
            details["reasons"] = list(exc.reasons)
        elif isinstance(exc, InvalidRequest):
            details["path"] = exc.path
        elif isinstance(exc, numa_errors.InvalidConstraint):
            details["key"] = exc.key
        elif isinstance(exc, pci_errors.InvalidRequest) and exc.field:
            details["field"] = exc.field
        elif isinstance(exc, pci_errors.DevicesUnavailable):
            details["reason"] = exc.kwargs["reason"]
        return _error(exc.code, str(exc), details)
    # A bug, not a condition: keep the traceback in our log, give the caller
    # a code it can match and no internals.
    LOG.exception("RPC %s failed unexpectedly", method)
    return _error(INTERNAL_ERROR, f"{method} failed: {type(exc).__name__}", {})


def _error(code, message, details):
    return {
        "ok": False,
        "error": {
            "code": code,
            "message": escaped(message),
            "retriable": code in RETRIABLE,
            "details": escaped_tree(details),
        },
    }
