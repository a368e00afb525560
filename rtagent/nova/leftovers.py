# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The allocation of a kept move's migration that nova meant to delete at its
source and could not (docs/troubleshooting.md, "A kept move's migration
allocation left at its source").

At the end of a move that is kept (a live migration completed, a resize or
cold migration confirmed), nova-compute at the source deletes the
allocation the conductor gave the migration's consumer: the guest's old
place on the source. nova's report client logs and swallows a Placement it
cannot reach (``safe_connect``), and the move completes anyway: the
allocation stays for good, and stock nova's tracker never looks at it again.
The agent sees it as an unknown consumer of the node (two audits in a row
found it) and, by its RPC contract, never deletes a migration's consumer:
that is the caller's. Here nova-compute, the caller, finishes what it
started: an unknown consumer of the node that is one of nova's own
migrations, out of this node, kept, has its allocation deleted as nova's
source would have (nova's ``delete_allocation_for_instance``).

Nothing else is touched: a migration under way, failed, reverted or
cancelled (nova moves those allocations back to the instance itself), a
migration into this node, and a consumer that is no migration of nova's
stay reported for the operator.
"""

import logging

from nova import exception, objects

LOG = logging.getLogger(__name__)

# The statuses of a kept move once its source is done with it: a live
# migration's (_post_live_migration) and a confirmed resize's or cold
# migration's (confirm_resize); nova deletes the migration's allocation at
# both steps.
KEPT = frozenset({"completed", "confirmed"})


def delete_kept(context, reportclient, host, nodename, unknown):
    """Delete the allocations of the kept moves out of ``(host,
    nodename)`` among ``unknown`` (the node's unknown consumers, as the
    agent's ``get_status`` reports them). A failure is logged, and the next
    periodic tries again (the consumer is still reported).

    :returns: the migration UUIDs whose allocations were deleted.
    """
    deleted = []
    for uuid in unknown:
        migration = _migration(context, uuid)
        if migration is None or migration.status not in KEPT:
            continue
        if (migration.source_compute, migration.source_node) != (host, nodename):
            continue
        try:
            # nova's own call at the step that could not reach Placement;
            # a Placement still unreachable returns None (safe_connect).
            done = reportclient.delete_allocation_for_instance(
                context, uuid, consumer_type="migration", force=True
            )
        except exception.AllocationDeleteFailed as exc:
            LOG.warning(
                "The allocation of migration %s (instance %s, %s) could not be deleted now: %s",
                uuid,
                migration.instance_uuid,
                migration.status,
                exc,
            )
            continue
        if done:
            LOG.warning(
                "Migration %s of instance %s is %s but still held its allocation on "
                "node %s (nova's delete at that step did not reach Placement): "
                "deleted now",
                uuid,
                migration.instance_uuid,
                migration.status,
                nodename,
            )
            deleted.append(uuid)
    return deleted


def _migration(context, uuid):
    try:
        return objects.Migration.get_by_uuid(context, uuid)
    except exception.MigrationNotFound:
        return None
