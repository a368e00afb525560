"""Errors of guest NUMA requests. Codes are stable: never change them."""

from rtagent import exception


class NumaError(exception.RtagentError):
    code = "numa.error"
    msg_fmt = "NUMA error."


class InvalidConstraint(NumaError):
    """A flavor extra spec or image property is invalid, or conflicts with
    another; ``key`` names the one at fault."""

    code = "numa.invalid_constraint"
    msg_fmt = "{key}: {reason}"

    def __init__(self, key, reason):
        self.key = key
        self.reason = reason
        super().__init__(key=key, reason=reason)
