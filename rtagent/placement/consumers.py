"""Writing a consumer's allocations back as its owner wrote them.

Every allocation pass that changes a consumer it does not own (healing,
the pinned-vCPU move, the PCI devices a scheduler left out) and the
reshaper write on one ``GET /allocations/{c}`` answer: its consumer
generation (a writer since makes the write a conflict, not a lost update),
its project and user, and its consumer type.
"""

import re

# A consumer written by an older client has no type; nova writes INSTANCE.
DEFAULT_CONSUMER_TYPE = "INSTANCE"
_CONSUMER_TYPE = re.compile(r"\A[A-Z0-9_]{1,255}\Z")


def consumer_type(body):
    """The ``consumer_type`` to write back for a consumer as Placement
    answered it (``GET /allocations/{c}``): its own, or INSTANCE for one
    that has none. Placement shows a consumer written before consumer
    types as ``unknown``, a value it refuses on write."""
    found = body.get("consumer_type")
    if isinstance(found, str) and _CONSUMER_TYPE.match(found):
        return found
    return DEFAULT_CONSUMER_TYPE


def rewrite(client, consumer, allocations, read):
    """Replace ``consumer``'s allocations with ``allocations``
    ({provider: {class: amount}}), on the ``GET /allocations/{c}`` answer
    ``read`` they are based on: its generation (a writer since makes it a
    conflict, not a lost update), its owner and its consumer type kept.

    :raises GenerationConflict: the consumer changed since ``read``.
    :raises PlacementRequestFailed: Placement refused it (e.g. capacity).
    """
    client.put_allocations(
        consumer,
        allocations,
        consumer_generation=read["consumer_generation"],
        project_id=read["project_id"],
        user_id=read["user_id"],
        consumer_type=consumer_type(read),
    )
