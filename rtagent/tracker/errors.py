"""Errors raised by the tracker. Codes are stable: never change them."""

from rtagent import exception


class TrackerError(exception.RtagentError):
    code = "tracker.error"
    msg_fmt = "Tracker error."


class ComputeResourcesUnavailable(TrackerError):
    """A claim does not fit. Nothing was changed.

    ``reasons`` lists one human-readable line per resource that did not fit.
    """

    code = "tracker.compute_resources_unavailable"
    msg_fmt = "Claim for instance {instance_uuid} refused: {summary}"

    def __init__(self, instance_uuid, reasons):
        self.instance_uuid = instance_uuid
        self.reasons = tuple(reasons)
        super().__init__(instance_uuid=instance_uuid, summary="; ".join(self.reasons))


class NodeNotReady(TrackerError):
    """Claims cannot be checked before the first successful host audit."""

    code = "tracker.node_not_ready"
    msg_fmt = "Node {node} has not been audited yet; claims are refused until it is."


class InvalidClaimRequest(TrackerError):
    """A claim request is malformed (bad UUID, negative sizes, unknown limit)."""

    code = "tracker.invalid_claim_request"
    msg_fmt = "Invalid claim request: {reason}"


class InstanceClaimConflict(TrackerError):
    """The instance already holds a claim for different resources."""

    code = "tracker.instance_claim_conflict"
    msg_fmt = (
        "Instance {instance_uuid} already holds a claim for {existing}; "
        "a claim for {requested} was refused. Abort the existing claim first."
    )


class DevicesConflict(InstanceClaimConflict):
    """Devices cannot be attached to or detached from the instance's claim
    as asked (same code as any other conflict with the claim it holds)."""

    msg_fmt = "Instance {instance_uuid}: {reason}; nothing changed."


class InstanceNotFound(TrackerError):
    code = "tracker.instance_not_found"
    msg_fmt = "Instance {instance_uuid} is not tracked on node {node}."


class NodeNotFound(TrackerError):
    code = "tracker.node_not_found"
    msg_fmt = "Node {node} is not reported by this agent."


class HostUnavailable(TrackerError):
    """The hypervisor cannot be read; claims wait until it can."""

    code = "tracker.host_unavailable"
    msg_fmt = "Node {node} is unavailable: {reason}. Claims are refused until it returns."


class StateError(TrackerError):
    """The durable state cannot be read or written."""

    code = "tracker.state_error"
    msg_fmt = "State store {path}: {reason}"


class NodeIdentityError(TrackerError):
    """The node identity file is unusable; the operator must act."""

    code = "tracker.node_identity_error"
    msg_fmt = "Node identity {path}: {reason}"


class ClaimPending(TrackerError):
    """A standalone claim of the instance is writing its allocation to
    Placement; other calls on the instance wait until it is settled."""

    code = "tracker.claim_pending"
    msg_fmt = (
        "Instance {instance_uuid} on node {node} has a standalone claim whose "
        "Placement write is in flight; retry shortly."
    )


class MoveConflict(TrackerError):
    """A move was started again with other details than those recorded."""

    code = "tracker.move_conflict"
    msg_fmt = "Move {migration_uuid} is already recorded differently: {reason}. Nothing changed."
