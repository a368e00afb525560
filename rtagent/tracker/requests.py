"""Building checked values from a caller's claim and move requests.

Pure and lock-free: a malformed request is refused here, before the
tracker lock is taken, with :class:`~rtagent.tracker.errors.InvalidClaimRequest`.
"""

from rtagent.resources import frozen_map
from rtagent.tracker import errors, ledger
from rtagent.tracker.model import Flavor, Instance, Migration, check_uuid


def check_flavor(flavor):
    if not isinstance(flavor, Flavor):
        raise errors.InvalidClaimRequest(reason=f"flavor must be a Flavor, got {flavor!r}")
    return flavor


def instance(instance_uuid, flavor, *, volume_backed=False, project_id=""):
    """The :class:`Instance` an instance claim asks for."""
    check_flavor(flavor)
    return Instance(
        check_uuid(instance_uuid),
        flavor,
        frozen_map(ledger.requested_resources(flavor, volume_backed)),
        volume_backed=bool(volume_backed),
        project_id=str(project_id or ""),
    )


def migration(
    migration_uuid,
    instance_uuid,
    migration_type,
    *,
    source_node,
    dest_node,
    old_flavor,
    new_flavor=None,
    volume_backed=False,
):
    """The :class:`Migration` a move asks for; ``new_flavor`` defaults to
    ``old_flavor`` (migrations, live migrations, evacuations)."""
    new_flavor = check_flavor(new_flavor or old_flavor)
    check_flavor(old_flavor)
    return Migration(
        uuid=check_uuid(migration_uuid, "migration_uuid"),
        instance_uuid=check_uuid(instance_uuid),
        migration_type=migration_type,
        source_node=check_uuid(source_node, "source_node"),
        dest_node=check_uuid(dest_node, "dest_node"),
        old_flavor=old_flavor,
        new_flavor=new_flavor,
        old_resources=frozen_map(ledger.requested_resources(old_flavor, volume_backed)),
        new_resources=frozen_map(ledger.requested_resources(new_flavor, volume_backed)),
    )
