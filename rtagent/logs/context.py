"""The RPC caller's request id in every log line of its call.

oslo.log's formatter takes the request context from oslo.context's
thread-local store (``RequestContext.update_store``) and then writes
``[global_request_id request_id user project ...]`` in each line, from
whichever module logs (every module logs through the one oslo.log setup of
``rtagent.cmd.main``). Each RPC call is handled in one executor thread from
start to end, so installing the caller's context at the start of the call
labels everything logged for it: the endpoint, the tracker, the store, and
oslo.messaging's reply. The next call on that thread installs its own, so
no id outlives the next call.

The context dict is the caller's: only ids in the exact form OpenStack
generates are taken (``req-<uuid>``, 1-64 character user and project ids),
never its token or anything free-form, so a log line cannot be forged.
A call without a usable request id gets a new one of ours.
"""

import re

from oslo_context import context

_REQUEST_ID = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")

# RequestContext.from_dict's keys, and the checks each value must pass.
_TAKEN = {
    "request_id": _REQUEST_ID,
    "global_request_id": _REQUEST_ID,
    "user": _ID,
    "project_id": _ID,
}


def adopt(ctxt):
    """Install the request context of an RPC call for this thread's log lines.

    :param ctxt: the context dict the caller sent (any value: it is not
        trusted), e.g. nova's ``RequestContext.to_dict()``.
    :returns: the installed :class:`oslo_context.context.RequestContext`.
    """
    values = {}
    if isinstance(ctxt, dict):
        for key, pattern in _TAKEN.items():
            value = ctxt.get(key)
            if key == "user" and value is None:
                value = ctxt.get("user_id")  # nova sends both; either names the user
            if isinstance(value, str) and pattern.fullmatch(value):
                values[key] = value
    # from_dict generates a request id when none is given, and (overwrite
    # defaults to True) stores the context as this thread's current one.
    return context.RequestContext.from_dict(values)
