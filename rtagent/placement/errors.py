"""Placement errors, mapped from Placement's error *codes*, never its text.

Placement answers errors as ``{"errors": [{"status", "code", "detail"}]}``.
:func:`from_response` turns such an answer into one of the classes below.
"""

from rtagent import exception

# Placement's own codes (placement/errors.py); they never change.
CONCURRENT_UPDATE = "placement.concurrent_update"
DUPLICATE_NAME = "placement.duplicate_name"
INVENTORY_INUSE = "placement.inventory.inuse"


class PlacementError(exception.RtagentError):
    code = "placement.error"
    msg_fmt = "Placement error."


class PlacementUnavailable(PlacementError):
    """Placement could not be reached, or failed on its side (5xx)."""

    code = "placement.unavailable"
    msg_fmt = "Placement is unavailable ({method} {url}): {reason}"


class PlacementRequestFailed(PlacementError):
    """Placement refused a request (4xx) for a reason other than below."""

    code = "placement.request_failed"
    msg_fmt = "Placement refused {method} {url}: HTTP {status} {placement_code}: {detail}"

    def __init__(self, method, url, status, placement_code, detail):
        self.status = status
        self.placement_code = placement_code
        self.detail = detail
        super().__init__(
            method=method, url=url, status=status, placement_code=placement_code, detail=detail
        )


class GenerationConflict(PlacementRequestFailed):
    """Someone else changed the provider (or consumer) since we read it."""

    code = "placement.generation_conflict"


class DuplicateProviderName(PlacementRequestFailed):
    """Placement refused a provider's name: another provider has it
    (Placement's ``placement.duplicate_name``). The sync reads it as
    :class:`ProviderNameTaken`, which says what to do."""

    code = "placement.provider_name_conflict"


class InventoryInUse(PlacementRequestFailed):
    """An inventory change would leave allocations without capacity."""

    code = "placement.inventory_in_use"


class MicroversionUnsupported(PlacementRequestFailed):
    code = "placement.microversion_unsupported"


class PlacementDenied(PlacementRequestFailed):
    """Placement answered 401 or 403: it refused the token it was given
    (expired, or without the role Placement asks for). Not to be confused
    with :class:`KeystoneAuthFailed`, where no request reached Placement."""

    code = "placement.auth_failed"


class ProviderChanging(PlacementError):
    """A provider changed between two reads of it; worth another attempt."""

    code = "placement.provider_changing"
    msg_fmt = "Provider {uuid} changed while it was being read"


class KeystoneAuthFailed(PlacementError):
    """keystoneauth could not get a token or find Placement in the catalog:
    no request reached Placement (see :class:`PlacementDenied`)."""

    code = "placement.auth_error"
    msg_fmt = (
        "Cannot reach Placement as configured ({method} {url}): {reason}. "
        "Check the [placement] auth and endpoint options."
    )


class SyncBackingOff(PlacementError):
    """A node's sync failed recently and waits before the next attempt
    (no request was sent). The node is still out of sync."""

    code = "placement.sync_backing_off"
    msg_fmt = "Sync of node {node} backs off for {retry_in:.0f} s more after: {last_error}"


class SyncConflictsExhausted(PlacementError):
    """Generation conflicts outlasted the retry policy; the next tick retries."""

    code = "placement.sync_conflicts_exhausted"
    msg_fmt = "Gave up syncing provider tree {root} after {attempts} conflicting attempts"


class ProviderNameTaken(PlacementError):
    """Our root provider name belongs to a provider with another UUID."""

    code = "placement.provider_name_taken"
    msg_fmt = (
        "Cannot create resource provider {name!r} with UUID {uuid}: Placement "
        "already has a provider of that name with another UUID. Another agent "
        "(nova-compute?) may be registered for this hypervisor; remove it, or "
        "put that provider's UUID in the compute_id file under state_path if "
        "it is this node."
    )


class AllocationRefused(PlacementError):
    """Placement refused to record a consumer's allocations (not enough
    capacity, the consumer already holds others, an unknown provider)."""

    code = "placement.allocation_refused"
    msg_fmt = "Placement refused the allocations of consumer {consumer}: {reason}"


class ReshapeUnsupported(PlacementError):
    """A resource class leaves a provider that has allocations of it, and
    the desired tree does not name exactly one provider to move them to."""

    code = "placement.reshape_unsupported"
    msg_fmt = (
        "Cannot move {resource_class} allocations off provider {uuid}: "
        "{destinations} providers in the desired tree gain that class "
        "(a reshape needs exactly one)"
    )


def from_response(method, url, response):
    """Build the exception matching an error ``response`` (status >= 400)."""
    status = response.status_code
    placement_code, detail = None, response.text[:500]
    try:
        first = response.json()["errors"][0]
        placement_code = first.get("code")
        detail = first.get("detail", detail).strip()
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        pass
    if status >= 500:
        return PlacementUnavailable(method=method, url=url, reason=f"HTTP {status}: {detail}")
    cls = PlacementRequestFailed
    if status == 409 and placement_code == CONCURRENT_UPDATE:
        cls = GenerationConflict
    elif status == 409 and placement_code == DUPLICATE_NAME:
        cls = DuplicateProviderName
    elif status == 409 and placement_code == INVENTORY_INUSE:
        cls = InventoryInUse
    elif status == 406:
        cls = MicroversionUnsupported
    elif status in (401, 403):
        cls = PlacementDenied
    return cls(method, url, status, placement_code, detail)
