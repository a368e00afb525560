"""Building checked values from a caller's claim and move requests.

Pure and lock-free: a malformed request is refused here, before the
tracker lock is taken, with :class:`~rtagent.tracker.errors.InvalidClaimRequest`
(or :class:`~rtagent.numa.errors.InvalidConstraint` for a flavor extra spec
or image property).
"""

from rtagent.numa import constraints
from rtagent.resources import PCPU, VCPU, frozen_map
from rtagent.tracker import errors, ledger
from rtagent.tracker.model import Flavor, Instance, Migration, check_uuid, releases


def check_flavor(flavor):
    if not isinstance(flavor, Flavor):
        raise errors.InvalidClaimRequest(reason=f"flavor must be a Flavor, got {flavor!r}")
    return flavor


def topology(flavor, extra_specs=None, image_properties=None):
    """The guest's NUMA topology (a
    :class:`~rtagent.numa.constraints.GuestTopology`), or None when the
    flavor and image ask for none.

    :raises InvalidConstraint: an extra spec or image property is invalid
        or conflicts with another (its ``key`` names it).
    :raises InvalidClaimRequest: ``extra_specs`` or ``image_properties``
        is not a mapping of strings.
    """
    check_flavor(flavor)
    for name, value in (("extra_specs", extra_specs), ("image_properties", image_properties)):
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise errors.InvalidClaimRequest(reason=f"{name} must be a mapping of names to values")
    return constraints.guest_topology(flavor.vcpus, flavor.memory_mb, extra_specs, image_properties)


def resources(flavor, volume_backed=False, guest=None):
    """What an instance of ``flavor`` takes from the node: its flavor's
    classes, with pinned vCPUs (and an isolated emulator thread's CPU) as
    PCPU instead of VCPU when ``guest`` (its topology) pins any."""
    amounts = ledger.requested_resources(flavor, volume_backed)
    if guest is None:
        return amounts
    pinned = sum(len(c.pcpuset) for c in guest.cells)
    pcpus = pinned + (1 if guest.emulator_isolate else 0)
    if pcpus:
        amounts[PCPU] = pcpus
        if flavor.vcpus - pinned:
            amounts[VCPU] = flavor.vcpus - pinned
        else:
            amounts.pop(VCPU, None)
    return amounts


def on_shared_cpus(amounts, guest):
    """``amounts`` (from :func:`resources`) as nova's upgrade fallback
    counts them on a host without ``cpu_dedicated_set``: every vCPU as VCPU,
    pinned ones too, and no PCPU (nova's scheduler then asks for the
    flavor's vCPUs as VCPU, no more for an isolated emulator thread)."""
    amounts = dict(amounts)
    pcpus = amounts.pop(PCPU, 0)
    if pcpus:
        emulator = 1 if guest is not None and guest.emulator_isolate else 0
        amounts[VCPU] = amounts.get(VCPU, 0) + pcpus - emulator
    return amounts


def on_dedicated_cpus(amounts, numa):
    """``amounts`` of a claim made in nova's upgrade fallback (its pinned
    vCPUs as VCPU) as a claim on ``cpu_dedicated_set`` counts them: the
    pinned vCPUs (and an isolated emulator thread's CPU) as PCPU. Unchanged
    for a claim that pins nothing or counts PCPU already.

    :param numa: the claim's :class:`~rtagent.numa.usage.NumaClaim`, or None.
    """
    amounts = dict(amounts)
    if numa is None or not numa.pcpus or amounts.get(PCPU):
        return amounts
    shared = amounts.get(VCPU, 0) - sum(len(c.pcpuset) for c in numa.guest_cells)
    amounts[PCPU] = numa.pcpus
    if shared > 0:
        amounts[VCPU] = shared
    else:
        amounts.pop(VCPU, None)
    return amounts


def states_of(states):
    """The nova states of a claim or move: ``vm_state`` (default
    ``building``, an instance being built), ``task_state`` and ``os_type``
    (default None), from a mapping that may name any of them."""
    states = states or {}
    found = {
        "vm_state": states.get("vm_state") or "building",
        "task_state": states.get("task_state"),
        "os_type": states.get("os_type"),
    }
    if releases(found["vm_state"], found["task_state"]):
        # nova frees an instance in these states: nothing to claim or move.
        raise errors.InvalidClaimRequest(
            reason=f"vm_state {found['vm_state']} with task_state {found['task_state']} "
            "holds no resources"
        )
    return found


def instance(instance_uuid, flavor, *, volume_backed=False, project_id="", guest=None, states=None):
    """The :class:`Instance` an instance claim asks for (its ``numa`` is
    set by the claim, when ``guest`` gives a topology); ``states`` as
    :func:`states_of` reads them."""
    check_flavor(flavor)
    return Instance(
        check_uuid(instance_uuid),
        flavor,
        frozen_map(resources(flavor, volume_backed, guest)),
        volume_backed=bool(volume_backed),
        project_id=str(project_id or ""),
        **states_of(states),
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
    guest=None,
    project_id="",
    states=None,
):
    """The :class:`Migration` a move asks for; ``new_flavor`` defaults to
    ``old_flavor`` (migrations, live migrations, evacuations); ``guest``
    is the topology the new flavor asks for, or None; ``project_id`` and
    ``states`` (:func:`states_of`) are the instance's, which it keeps
    where it lands."""
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
        new_resources=frozen_map(resources(new_flavor, volume_backed, guest)),
        project_id=str(project_id or ""),
        **{k: v for k, v in states_of(states).items() if k != "task_state"},
    )
