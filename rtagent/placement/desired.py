"""What the agent wants Placement to hold for a node: a pure function of the
tracker's snapshot.

The root provider carries nova's data model: named after the hypervisor
hostname, the node UUID, VCPU / PCPU / MEMORY_MB / DISK_GB inventories as
nova computes them (their ``reserved`` also holds what running domains
without a claim use), the COMPUTE_NODE and OWNER_NOVA traits, and
COMPUTE_STATUS_DISABLED while the node is disabled. Child providers (PCI
devices) and driver traits plug in through ``children`` and ``driver_traits``.
"""

import os_traits

from rtagent.placement import shared_pool
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import ROOT_CLASSES, STANDARD_CLASSES, Inventory, frozen_map
from rtagent.tracker import ledger, untracked

# Traits every root carries. nova 34.0.0's scheduler requires OWNER_NOVA on
# compute roots (and PCI providers) once every compute reports it.
ROOT_TRAITS = frozenset({os_traits.COMPUTE_NODE, os_traits.OWNER_NOVA})

# Set while the node is disabled; nova's scheduler prefilter excludes
# providers with it. Always managed, so enabling the node removes it.
DISABLED_TRAIT = os_traits.COMPUTE_STATUS_DISABLED
REMOTE_MANAGED_PORTS = os_traits.COMPUTE_REMOTE_MANAGED_PORTS


def root_provider(snapshot, driver_traits=frozenset(), managed_traits=frozenset()):
    """The desired root provider for ``snapshot`` (a tracker NodeSnapshot).

    :param driver_traits: traits the host driver reports now.
    :param managed_traits: every trait the driver *could* report, so that
        one it stops reporting is removed; others' traits are kept.
    """
    policy = snapshot.policy
    # Unresolved ratios: None where unconfigured, so Placement's value stands.
    invs = ledger.inventories(snapshot.host, policy, resolve_ratios=False)
    if policy.reserve_untracked:
        # Running domains without a claim, when the agent counts them: the
        # scheduler must see the node as full as the agent does. Reserved
        # in physical units with the ratios claims are checked with (see
        # rtagent.tracker.untracked); it changes only when such a domain
        # starts or stops, so a steady tick still writes nothing.
        units = untracked.reservation(snapshot.inventories, snapshot.untracked_usage)
        invs = untracked.add_reserved(invs, units)
    traits = ROOT_TRAITS | frozenset(driver_traits)
    if not any(d.tags.get("remote_managed") for d in snapshot.pci_devices or ()):
        # As nova: a driver able to bind remote-managed ports (a SmartNIC's
        # VFs) says so only while the node tracks such devices.
        traits -= {REMOTE_MANAGED_PORTS}
    if snapshot.disabled is not None:
        traits |= {DISABLED_TRAIT}
    return Provider(
        uuid=snapshot.node_uuid,
        name=snapshot.hypervisor_hostname,
        inventories=frozen_map(invs),
        traits=traits,
        managed_traits=traits | frozenset(managed_traits) | {DISABLED_TRAIT},
        # A class of the agent's whose total drops to 0 (e.g. no local
        # disk, or PCPU once cpu_dedicated_set is unset) is removed;
        # classes others put on the root are left alone.
        managed_classes=frozenset(ROOT_CLASSES),
        ratio_defaults=frozen_map(policy.initial_ratios),
    )


def desired_tree(snapshot, children=(), driver_traits=frozenset(), managed_traits=frozenset()):
    """The desired provider tree: the root plus ``children`` providers,
    plus what the host driver reports as providers of its own
    (``HostView.providers``)."""
    root = root_provider(snapshot, driver_traits, managed_traits)
    reported = getattr(snapshot.host, "providers", ()) if snapshot.host else ()
    root, extra = driver_providers(root, reported)
    pool = shared_pool.pool_provider(snapshot)
    if snapshot.host is not None:
        root = shared_pool.joined(root, snapshot)
    return ProviderTree((root, *children, *extra, *((pool,) if pool else ())))


def driver_providers(root, reported):
    """``root`` with what a driver reports for it, and the driver's other
    providers: its children, and roots beside the node's (sharing
    providers).

    The agent's own classes on the root stay the agent's unless the driver
    decides otherwise: a driver handed the agent's figures
    (``ProviderFacts.seeded``) that changes a record or removes a class
    decides that class, as nova's tracker publishes what its driver's
    ``update_provider_tree`` leaves. A driver handed none adds only other
    classes (the standard ones and PCPU stay the agent's). A driver's
    provider is managed by the driver's report: its classes and traits are
    what the driver says.
    """
    children = []
    for facts in reported:
        invs = {rc: Inventory.from_placement(dict(rec)) for rc, rec in facts.inventories}
        if facts.uuid == root.uuid:
            root = _driver_root(root, facts, invs)
            continue
        children.append(
            Provider(
                uuid=facts.uuid,
                name=facts.name,
                parent_uuid=facts.parent_uuid,
                inventories=frozen_map(invs),
                traits=frozenset(facts.traits),
                managed_traits=frozenset(facts.traits),
                managed_classes=frozenset(invs),
                sharing=facts.parent_uuid is None,
                **_aggregates(facts),
            )
        )
    return root, children


def _driver_root(root, facts, invs):
    """``root`` with the driver's report of it (``facts``, whose records are
    ``invs``) applied: see :func:`driver_providers`."""
    if facts.seeded is None:
        decided = {
            rc: inv
            for rc, inv in invs.items()
            if rc not in STANDARD_CLASSES and rc not in root.inventories
        }
        removed = set()
    else:
        seeded = {rc: Inventory.from_placement(dict(rec)) for rc, rec in facts.seeded}
        decided = {rc: inv for rc, inv in invs.items() if seeded.get(rc) != inv}
        removed = set(seeded) - set(invs)
    inventories = {rc: inv for rc, inv in root.inventories.items() if rc not in removed}
    inventories.update(decided)
    traits = frozenset(facts.traits)
    return root.replace(
        inventories=frozen_map(inventories),
        traits=root.traits | traits,
        managed_traits=root.managed_traits | traits,
        managed_classes=root.managed_classes | frozenset(decided) | frozenset(removed),
        **_aggregates(facts),
    )


def _aggregates(facts):
    """The aggregate fields of a driver's provider: managed only once the
    driver has reported any (an unmanaged provider's are never read)."""
    if not (facts.aggregates or facts.managed_aggregates):
        return {}
    return {
        "aggregates": frozenset(facts.aggregates),
        "managed_aggregates": frozenset(facts.managed_aggregates) | frozenset(facts.aggregates),
    }
