"""nova's upgrade fallback, left: claims made while pinned guests pinned
the shared CPUs (their pinned vCPUs counted as VCPU) counted again as
claims on ``cpu_dedicated_set`` count them, once the operator sets it.
Pure functions of :class:`~rtagent.tracker.state.NodeState` values.
"""

from rtagent.resources import frozen_map
from rtagent.tracker import requests


def left(before, after):
    """Whether ``after``, the state a reading made of ``before``, may hold
    claims of nova's upgrade fallback (pinned vCPUs counted as VCPU) that
    it must count as PCPU: the first reading after a start, or one where
    the dedicated set or the policy changed. A steady reading costs
    nothing."""
    return (
        before.host is None
        or before.host.cpu_dedicated_set != after.host.cpu_dedicated_set
        or before.policy.pinning_fallback != after.policy.pinning_fallback
    )


def pinned_as_pcpu(state):
    """``state`` with the claims made in nova's upgrade fallback
    counted as claims on ``cpu_dedicated_set`` count them (their pinned
    vCPUs as PCPU): the agent's half of the VCPU-to-PCPU reshape, once
    the operator sets ``cpu_dedicated_set``. Placement's half is the
    sync's (:mod:`rtagent.placement.reshape`, and late claims
    :mod:`rtagent.placement.passes.pinned_vcpus`). O(instances) when any
    holds a NUMA claim, else O(moves)."""
    recounted = state
    if state.sums.numa.cells:
        for instance in state.instances.values():
            counted = _on_dedicated(instance.resources, instance.numa)
            if counted is not None:
                recounted = recounted.with_instance(instance.replace(resources=counted))
    for move in state.migrations.values():
        old = _on_dedicated(move.old_resources, move.old_numa)
        new = _on_dedicated(move.new_resources, move.new_numa)
        if old is not None or new is not None:
            # In place, its sequence kept: which move counts is unchanged.
            counted = move.replace(
                old_resources=old if old is not None else move.old_resources,
                new_resources=new if new is not None else move.new_resources,
            )
            recounted = recounted.replace(migrations=recounted.migrations.set(move.uuid, counted))
    return recounted


def _on_dedicated(resources, numa):
    """``resources`` with pinned vCPUs as PCPU (a frozen mapping), or None
    when they count them so already (or pin nothing)."""
    counted = requests.on_dedicated_cpus(resources, numa)
    return frozen_map(counted) if counted != dict(resources) else None
