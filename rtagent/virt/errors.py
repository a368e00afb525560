"""Errors raised by host drivers."""

from rtagent import exception
from rtagent.excerpt import clip, excerpt


class VirtError(exception.RtagentError):
    code = "virt.error"
    msg_fmt = "Host driver error."


class HypervisorUnavailable(VirtError):
    """The hypervisor cannot be reached (connection refused, lost, closed)."""

    code = "virt.hypervisor_unavailable"
    msg_fmt = "Hypervisor at {uri} is unavailable: {reason}"


class InvalidConnectionURI(VirtError):
    code = "virt.invalid_connection_uri"
    msg_fmt = "Invalid libvirt connection URI {uri!r}: {reason}"


class HostReadError(VirtError):
    """The hypervisor answered, but a fact could not be read or parsed."""

    code = "virt.host_read_error"
    msg_fmt = "Could not read {what} from the host: {reason}"


class InvalidCPUSet(VirtError):
    """``[compute] cpu_shared_set`` / ``cpu_dedicated_set`` is bad for this host."""

    code = "virt.invalid_cpu_set"
    msg_fmt = "[compute] {option} = {value}: {reason}"

    def __init__(self, message=None, **kwargs):
        # Quoted, clipped: a set may be a megabyte long.
        if message is None:
            message = self.msg_fmt.format(**dict(kwargs, value=excerpt(kwargs.get("value"))))
        super().__init__(message, **kwargs)


class InvalidReservedHugePages(VirtError):
    """``[DEFAULT] reserved_huge_pages`` is malformed, or bad for this host.

    ``field`` is the part of the entry at fault (``node``, ``size``,
    ``count``, or the item that is not ``field:value``).
    """

    code = "virt.invalid_reserved_huge_pages"
    msg_fmt = "[DEFAULT] reserved_huge_pages = {entry}: {field}: {reason}"

    def __init__(self, message=None, **kwargs):
        # The entry is quoted, clipped: an option value may be a megabyte.
        if message is None:
            shown = dict(kwargs, entry=excerpt(kwargs.get("entry")))
            shown["field"] = clip(str(kwargs.get("field")), 60)
            message = self.msg_fmt.format(**shown)
        super().__init__(message, **kwargs)
