"""Hypervisor truth versus claims, as a pure comparison.

Two kinds of drift are reported (never "fixed" silently):

* *untracked domains*: running on the host, but no claim accounts for them
  (a guest started by hand, or claims lost with a state directory). By
  option their vCPUs and memory count as used, so claims cannot
  oversubscribe the host they share;
* *missing domains*: instances tracked here for longer than a grace period
  without a domain on the host (a build that never started, a guest
  deleted behind the agent's back).
"""

import dataclasses

from rtagent.resources import MEMORY_MB, VCPU
from rtagent.virt.host import DOMAIN_SHUTOFF


@dataclasses.dataclass(frozen=True)
class Drift:
    """:param untracked: DomainInfo of running domains no claim accounts for.
    :param missing: instance UUIDs without a domain beyond the grace period.
    :param missing_since: instance UUID -> clock time it was first missed.
    """

    untracked: tuple = ()
    missing: tuple = ()
    missing_since: dict = dataclasses.field(default_factory=dict)

    def untracked_usage(self):
        """Resources the untracked domains use (shut-off ones use none)."""
        return [
            {VCPU: d.vcpus, MEMORY_MB: d.memory_mb}
            for d in self.untracked
            if d.state != DOMAIN_SHUTOFF
        ]


def compare(domains, instance_uuids, moving_uuids, *, previous, now, grace):
    """Compare the host's domains with what is claimed on this node.

    :param domains: DomainInfo tuple from the host view.
    :param instance_uuids: instances that live on this node.
    :param moving_uuids: instances of moves in progress involving this node
        (a live migration's domain appears before the move finishes).
    :param previous: the previous :class:`Drift` (for missing_since).
    :param now: clock time (seconds).
    :param grace: seconds an instance may lack a domain before reported.
    """
    on_host = {d.uuid for d in domains}
    known = set(instance_uuids) | set(moving_uuids)
    untracked = tuple(d for d in domains if d.uuid not in known)
    since = {
        uuid: previous.missing_since.get(uuid, now)
        for uuid in instance_uuids
        if uuid not in on_host
    }
    missing = tuple(sorted(u for u, t in since.items() if now - t >= grace))
    return Drift(untracked=untracked, missing=missing, missing_since=since)


def restart_report(snapshot, counted):
    """Lines for the operator where restored claims and the host disagree
    (logged after the first audit following a start)."""
    lines = []
    if snapshot.drift.untracked:
        lines.append(
            f"{len(snapshot.drift.untracked)} domain(s) on the host have no claim here "
            f"({', '.join(d.uuid for d in snapshot.drift.untracked[:5])}). If they are "
            "instances of this node, its state directory was lost or replaced. "
            + (
                "Running ones count as used until claimed or removed."
                if counted
                else "They are NOT counted as used (count_untracked_domains = false)."
            )
        )
    if snapshot.assigned_missing:
        lines.append(
            "identifiers assigned to instances are no longer offered: "
            f"{dict(snapshot.assigned_missing)}. Check the devices; the claims keep "
            "them until they are released."
        )
    return lines
