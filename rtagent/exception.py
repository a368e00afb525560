"""The root of rtagent's exception hierarchy.

Each package (tracker, placement, virt, conf) derives its own exceptions from
:class:`RtagentError`. Every class carries a stable ``code`` string: callers,
logs and (later) RPC replies match on the code, never on the message text.
Once a code is published it does not change.
"""


class RtagentError(Exception):
    """Base class of every error rtagent raises on purpose."""

    code = "rtagent.error"
    msg_fmt = "An unknown rtagent error occurred."

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            message = self.msg_fmt.format(**kwargs)
        self.message = message
        super().__init__(message)
