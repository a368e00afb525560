"""Errors of PCI device specs, aliases, requests and device states.

Codes are stable: never change them.
"""

from rtagent import exception


class PciError(exception.RtagentError):
    code = "pci.error"
    msg_fmt = "PCI error."


class _InvalidEntry(PciError):
    """An entry of a multi-valued ``[pci]`` option is invalid. ``entry`` is
    its position (0-based) among the option's values, ``field`` the key at
    fault (None when the entry as a whole is wrong, e.g. not JSON)."""

    def __init__(self, entry, field, reason):
        self.entry = entry
        self.field = field
        self.reason = reason
        super().__init__(entry=entry, field=field or "(entry)", reason=reason)


class InvalidDeviceSpec(_InvalidEntry):
    """A ``[pci] device_spec`` entry is invalid."""

    code = "pci.invalid_device_spec"
    msg_fmt = "[pci] device_spec entry {entry}: {field}: {reason}"


class InvalidAlias(_InvalidEntry):
    """A ``[pci] alias`` entry is invalid."""

    code = "pci.invalid_alias"
    msg_fmt = "[pci] alias entry {entry}: {field}: {reason}"


class InvalidRequest(PciError):
    """A PCI request names an unknown alias or has a bad count or field.
    ``field`` is the path of the value at fault (``pci_requests.0.alias``),
    or None when the requests as a whole are wrong."""

    code = "pci.invalid_request"
    msg_fmt = "PCI request: {where}{reason}"

    def __init__(self, reason, field=None):
        self.reason = reason
        self.field = field
        super().__init__(where=f"{field}: " if field else "", reason=reason)


class DevicesUnavailable(PciError):
    """No set of free devices satisfies the requests (with their NUMA
    policies); ``reason`` says which request could not be met."""

    code = "pci.devices_unavailable"
    msg_fmt = "PCI devices unavailable: {reason}"


class InvalidTransition(PciError):
    """A device cannot go from its status to the one asked (e.g. claiming
    an allocated device, or freeing a device another instance holds)."""

    code = "pci.invalid_transition"
    msg_fmt = "PCI device {address}: {reason}"


class PlacementLayoutInvalid(PciError):
    """The tracked devices cannot be reported to Placement as nova models
    them (``[pci] report_in_placement``): a PF tracked together with its
    VFs, or the VFs of one PF with different resource classes or traits.
    The node's sync stops until ``[pci] device_spec`` is fixed."""

    code = "pci.placement_layout_invalid"
    msg_fmt = "PCI devices under {address} cannot be reported to Placement: {reason}"
