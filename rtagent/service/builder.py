"""The builder: an agent assembled from configuration (the only place that reads conf;
the service that runs it is :mod:`rtagent.service.daemon`).

Everything below this module receives plain values (a policy, a URI, an
adapter), never the ConfigOpts object.
"""

import logging
import uuid as uuidlib

from keystoneauth1 import loading as ks_loading

from rtagent.agent import Agent
from rtagent.conf import default as default_conf
from rtagent.conf import pci as pci_conf
from rtagent.conf import placement as placement_conf
from rtagent.placement import provider_config
from rtagent.placement.backoff import SyncBackoff
from rtagent.placement.checkpoint import MetaRecord
from rtagent.placement.client import MICROVERSION, PlacementClient
from rtagent.placement.passes.heal import HealBudget
from rtagent.placement.publisher import NodePublisher
from rtagent.placement.retry import RetryPolicy
from rtagent.placement.sync import ProviderSync, RememberedChildren
from rtagent.resources import DISK_GB, MEMORY_MB, VCPU, frozen_map
from rtagent.tracker import identity
from rtagent.tracker.ledger import ResourcePolicy
from rtagent.tracker.nodes import NodeSet
from rtagent.tracker.store import Store
from rtagent.tracker.tracker import Tracker
from rtagent.virt import hugepages

LOG = logging.getLogger(__name__)

# The tracker store's metadata key of a node's published child providers.
PUBLISHED_CHILDREN_KEY = "placement_children:{node}"
# The last synced Placement view, and the root generation at which the
# unknown-consumer check last found nothing: what a restart resumes from
# (rtagent.placement.checkpoint).
SYNCED_VIEW_KEY = "placement_view:{node}"
UNKNOWN_CHECKED_KEY = "placement_unknown_checked:{node}"


def _configured_ratio(conf, name):
    value = conf[name]
    if value == 0.0:
        # nova documents 0.0 as "unset"; existing nova.conf files use it.
        LOG.warning("%s = 0.0 is treated as unset (as nova does)", name)
        return None
    return value


def policy_from_conf(conf):
    """The :class:`ResourcePolicy` that ``conf`` describes.

    :raises rtagent.virt.errors.InvalidReservedHugePages: a
        ``reserved_huge_pages`` value is malformed.
    """
    return ResourcePolicy(
        reserved_host_cpus=conf.reserved_host_cpus,
        reserved_host_memory_mb=conf.reserved_host_memory_mb,
        reserved_host_disk_mb=conf.reserved_host_disk_mb,
        reserved_huge_pages=hugepages.parse(conf.reserved_huge_pages),
        reserve_untracked=conf.rtagent.reserve_untracked_usage,
        numa_pack=conf.compute.packing_host_numa_cells_allocation_strategy,
        # As nova's libvirt driver: no fallback once cpu_shared_set is set.
        pinning_fallback=bool(
            conf.compute.cpu_pinning_fallback and not conf.compute.cpu_shared_set
        ),
        ratios=frozen_map(
            {
                VCPU: _configured_ratio(conf, "cpu_allocation_ratio"),
                MEMORY_MB: _configured_ratio(conf, "ram_allocation_ratio"),
                DISK_GB: _configured_ratio(conf, "disk_allocation_ratio"),
            }
        ),
        initial_ratios=frozen_map(
            {
                VCPU: conf.initial_cpu_allocation_ratio,
                MEMORY_MB: conf.initial_ram_allocation_ratio,
                DISK_GB: conf.initial_disk_allocation_ratio,
            }
        ),
    )


def retry_policy_from_conf(conf):
    return RetryPolicy(
        max_attempts=conf.rtagent.sync_max_attempts,
        base_delay=conf.rtagent.sync_retry_delay,
    )


def placement_adapter(conf):
    """A keystoneauth1 Adapter for Placement from the [placement] options."""
    group = placement_conf.GROUP.name
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group, auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=session, auth=auth, default_microversion=MICROVERSION
    )


def libvirt_driver(conf, observer=None, on_change=None, opener=None):
    """The configured :class:`LibvirtDriver`; ``observer`` is a
    :class:`rtagent.virt.libvirt.calls.CallObserver` told of every libvirt
    call (tests check none is made under a tracker lock), or None;
    ``on_change`` is called (from libvirt's event thread) when a lifecycle
    or device event asks for an early audit; ``opener`` (uri -> virConnect)
    replaces ``libvirt.open`` (benchmarks give each test-driver host its own
    hostname)."""
    # Imported here so that tools which never touch the hypervisor (the
    # config generator, unit tests of the core) do not need libvirt.
    from rtagent.virt.libvirt.driver import LibvirtDriver

    return with_disk_pool(
        conf,
        LibvirtDriver(
            conf.libvirt.connection_uri,
            conf.libvirt.instances_path,
            cpu_shared_set=conf.compute.cpu_shared_set,
            cpu_dedicated_set=conf.compute.cpu_dedicated_set,
            reserved_huge_pages=hugepages.parse(conf.reserved_huge_pages),
            cpu_metrics=default_conf.cpu_monitor_enabled(conf.compute_monitors),
            # libvirt's event loop must be registered before the first open;
            # lifecycle events then call on_change (an early audit).
            events=True,
            on_change=on_change,
            observer=observer,
            opener=opener,
        ),
    )


def with_disk_pool(conf, driver):
    """``driver``, reading DISK_GB from the Ceph pool when ``[libvirt]
    images_type = rbd`` (the daemon's libvirt driver and the embedded
    agent's nova driver alike), else ``driver`` itself."""
    if conf.libvirt.images_type != "rbd":
        return driver
    from rtagent.conf import libvirt as libvirt_conf
    from rtagent.virt.rbd import cluster, watch
    from rtagent.virt.rbd.driver import RbdPoolDriver

    pool = conf.libvirt.images_rbd_pool
    timeout = conf.libvirt.rbd_connect_timeout
    reader = cluster.PoolReader(
        libvirt_conf.ceph_conf(conf), pool, user=conf.libvirt.rbd_user, timeout=timeout
    )
    return RbdPoolDriver(
        driver,
        watch.PoolWatch(reader, timeout=timeout),
        pool,
        shared=not conf.libvirt.images_rbd_disk_on_each_root,
    )


def build_agent(
    conf,
    driver=None,
    adapter=None,
    observer=None,
    *,
    libvirt_observer=None,
    make_backoff=None,
    on_change=None,
    node_uuid=None,
):
    """Build an :class:`Agent` from a validated ``conf``.

    ``driver`` and ``adapter`` replace the configured ones (tests, demo).
    ``observer`` sees every Placement request (a ``RequestObserver``),
    ``libvirt_observer`` every libvirt call of the configured driver (a
    ``CallObserver``; unused when ``driver`` is given). ``make_backoff``
    (callable() -> SyncBackoff) replaces each node's sync backoff (tests).
    ``on_change`` is what the configured driver's hypervisor events call.
    ``node_uuid`` is the primary node's UUID on a first start, for a driver
    that owns node identity (nova's); an existing identity is kept.

    The command line's ``--accept-empty-state`` (``rtagent run``/``audit``)
    lets a store that is missing or empty where one existed start empty;
    ``audit --dry-run`` gets an in-memory copy of the store and writes
    nothing in the state directory.

    :raises rtagent.tracker.errors.StateError, NodeIdentityError: the state
        directory or the identity file is unusable, or the store is missing
        or empty where one existed.
    """
    # Config-like checks first, reported before the state directory is
    # touched: provider config files, then the driver (a bad [compute] CPU set).
    location = conf.compute.provider_config_location
    configs = provider_config.ProviderConfigSource(location, provider_config.load(location))
    driver = driver or libvirt_driver(conf, observer=libvirt_observer, on_change=on_change)
    # A conf without the command line (tests, tools) never accepts it.
    command = conf.command if "command" in conf else None
    accept_empty = bool(getattr(command, "accept_empty_state", False))
    # A dry run writes nothing: a copy of the store, no lock (it may run
    # beside the agent), no identity created.
    dry_run = bool(getattr(command, "dry_run", False))
    try:
        if dry_run:
            store = Store.copy_of(conf.state_path, accept_empty=accept_empty)
        else:
            store = Store(conf.state_path, accept_empty=accept_empty)
    except BaseException:
        driver.close()
        raise
    try:
        if dry_run:
            node_uuid = identity.current(store)
            if node_uuid is None:
                node_uuid = str(uuidlib.uuid4())
                LOG.warning(
                    "No node identity in %s yet: the dry run uses %s; the first run "
                    "creates the node's own",
                    conf.state_path,
                    node_uuid,
                )
        else:
            node_uuid = identity.load_or_create(conf.state_path, store, new_uuid=node_uuid)
        policy = policy_from_conf(conf)
        # [pci] needs a restart (a reload checks it and keeps this one).
        pci = pci_conf.parse(conf)

        def make_tracker(uuid):
            return Tracker(
                uuid,
                store,
                policy,
                pci=pci,
                count_untracked=conf.rtagent.count_untracked_domains,
                missing_grace=conf.rtagent.missing_domain_grace,
            )

        nodes = NodeSet(store, node_uuid, make_tracker)
        client = PlacementClient(adapter or placement_adapter(conf), observer)
        retry = retry_policy_from_conf(conf)
        budget = HealBudget(
            max_consumers=conf.rtagent.heal_max_consumers,
            max_seconds=conf.rtagent.heal_max_seconds,
        )
        window = conf.rtagent.placement_retry_window
        new_backoff = make_backoff or (lambda: SyncBackoff(window=window))

        def make_publisher(node):
            children = RememberedChildren(
                store.get_meta, store.set_meta, PUBLISHED_CHILDREN_KEY.format(node=node)
            )
            sync = ProviderSync(
                client,
                retry,
                children=children,
                refresh_interval=conf.rtagent.placement_refresh_interval,
                checkpoint=MetaRecord(
                    store.get_meta, store.set_meta, SYNCED_VIEW_KEY.format(node=node)
                ),
            )
            checked = MetaRecord(
                store.get_meta, store.set_meta, UNKNOWN_CHECKED_KEY.format(node=node)
            )
            return NodePublisher(
                node,
                sync,
                new_backoff(),
                client,
                heal_budget=budget,
                checked=checked,
                # A consumer found unknown is reported only when an audit a
                # refresh interval later finds it again.
                unknown_after=conf.rtagent.placement_refresh_interval,
            )

    except BaseException:
        store.close()
        driver.close()
        raise
    LOG.info("Node %s: state in %s", node_uuid, conf.state_path)
    return Agent(
        driver,
        nodes,
        make_publisher,
        store=store,
        client=client,
        provider_configs=configs,
        pci_in_placement=pci.report_in_placement,
    )
