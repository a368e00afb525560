# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""An rtagent agent inside nova-compute's process (nova's functional tests,
and a single-process deployment): built from nova's configuration, auditing
through nova's virt driver, reached through its RPC endpoint's methods.
"""

import logging

from oslo_config import cfg

from rtagent import conf as rtconf
from rtagent.conf import validation
from rtagent.nova import numa
from rtagent.nova.hostdriver import NovaHostDriver
from rtagent.nova.link import LocalLink
from rtagent.placement import prompt
from rtagent.rpc import status
from rtagent.rpc.endpoint import AgentEndpoint
from rtagent.service import builder

LOG = logging.getLogger(__name__)

# nova options that mean the same in rtagent, same names and groups.
_SHARED_DEFAULT_OPTS = (
    "my_ip",
    "reserved_host_memory_mb",
    "reserved_host_disk_mb",
    "reserved_host_cpus",
    "cpu_allocation_ratio",
    "ram_allocation_ratio",
    "disk_allocation_ratio",
    "initial_cpu_allocation_ratio",
    "initial_ram_allocation_ratio",
    "initial_disk_allocation_ratio",
)


# nova's [libvirt] RBD options that mean the same in rtagent (docs/rbd.md).
_RBD_OPTS = (
    "images_rbd_pool",
    "images_rbd_ceph_conf",
    "rbd_user",
    "rbd_connect_timeout",
)

# rtagent's layout option, read from nova.conf's [libvirt] by the embedded
# agent. Its default there is nova's layout, where rtagent.conf's is the
# sharing provider: a nova-compute upgraded to the embedded agent keeps
# DISK_GB on its root as stock nova published it, and moves it to the
# pool's provider (a reshape) only when nova.conf asks for it.
_ON_EACH_ROOT = cfg.BoolOpt(
    "images_rbd_disk_on_each_root",
    default=True,
    help="rtagent's option, embedded in nova-compute. With images_type = rbd: "
    "true (the default here) keeps DISK_GB on the root as stock nova reports "
    "it (nova's driver's reading of the cluster); false publishes the pool's "
    "DISK_GB once, on a sharing provider the hosts' roots share, read by "
    "the agent (docs/rbd.md).",
)


def agent_conf(nova_conf, host, state_path):
    """rtagent's configuration for an agent embedded in nova-compute: the
    options both share are taken from ``nova_conf``.

    The host driver lists no guests (nova's database says which instances
    are on the node), so untracked domains are neither counted nor reserved.
    """
    conf = rtconf.new_conf()
    conf([], project="rtagent", default_config_files=[])
    conf.set_override("host", host)
    conf.set_override("state_path", state_path)
    for name in _SHARED_DEFAULT_OPTS:
        value = nova_conf[name]
        if value is not None:
            conf.set_override(name, value)
    conf.set_override("count_untracked_domains", False, group="rtagent")
    conf.set_override("reserve_untracked_usage", False, group="rtagent")
    # Placement is read at every periodic audit nova-compute runs. nova's
    # report client caches for [compute] resource_provider_association_refresh
    # but drops its cache on SIGHUP (ComputeManager.reset), which nova's
    # tests and operators use to have an out-of-band change in Placement
    # (a trait an admin added or removed) reconciled at the next periodic;
    # the embedded agent has no such hook yet, so it does not cache.
    conf.set_override("placement_refresh_interval", 0, group="rtagent")
    # nova's tracker retries a failed sync at its next periodic, not after
    # a backoff; a fleet-wide spread is the daemon's concern.
    conf.set_override("placement_retry_window", 0, group="rtagent")
    conf.set_override("reserved_huge_pages", numa.reserved_huge_pages(nova_conf))
    conf.set_override("cpu_pinning_fallback", numa.pinning_fallback(nova_conf), group="compute")
    # [pci]: the same names and syntax in both; the agent chooses the
    # devices nova's PCI requests get (rtagent.nova.pcirows mirrors them).
    for name in ("device_spec", "alias", "report_in_placement"):
        conf.set_override(name, nova_conf.pci[name], group="pci")
    location = nova_conf.compute.provider_config_location
    conf.set_override("provider_config_location", location, group="compute")
    _disk_pool_opts(nova_conf, conf)
    return conf


def register_nova_opts(nova_conf):
    """Register on ``nova_conf`` the rtagent option the embedded agent reads
    from nova.conf's ``[libvirt]`` beside nova's own (idempotent)."""
    if "images_rbd_disk_on_each_root" not in nova_conf.libvirt:
        nova_conf.register_opt(_ON_EACH_ROOT, group="libvirt")


def _disk_pool_opts(nova_conf, conf):
    """With ``images_type = rbd`` and ``images_rbd_disk_on_each_root =
    false`` in nova.conf's ``[libvirt]``, the pool's options (same names
    and meanings, docs/rbd.md) for the agent to read it. In nova's layout
    (the default here) the agent reads nothing of the pool: DISK_GB on the
    root is nova's driver's reading, which nova's ``RBDDriver`` takes from
    the cluster (``ceph df``), as stock nova publishes it. Any other
    ``images_type`` (nova's lvm and ploop too) leaves the disk to nova's
    driver as well.

    :raises rtagent.conf.validation.ConfigError: for the sharing provider,
        no pool, an unreadable ceph.conf or no Ceph bindings (one line).
    """
    register_nova_opts(nova_conf)
    libvirt = nova_conf.libvirt
    if libvirt.images_type != "rbd" or libvirt.images_rbd_disk_on_each_root:
        return
    conf.set_override("images_type", "rbd", group="libvirt")
    conf.set_override("images_rbd_disk_on_each_root", False, group="libvirt")
    for name in _RBD_OPTS:
        if libvirt[name] is not None:
            conf.set_override(name, libvirt[name], group="libvirt")
    validation.check_rbd(conf)


def local_link(nova_conf, host, virt_driver, *, adapter, state_path, local_node_uuid=None):
    """A :class:`LocalLink` to a new agent over ``virt_driver``.

    :param adapter: a keystoneauth1 Adapter to Placement.
    :param state_path: the agent's own state directory (created if missing).
    :param local_node_uuid: callable() -> the host's node UUID for drivers
        whose resources carry none (nova's ``get_local_node_uuid``).
    """
    conf = agent_conf(nova_conf, host, state_path)
    nova_driver = NovaHostDriver(
        virt_driver,
        local_node_uuid=local_node_uuid,
        cpu_sets=lambda: numa.cpu_sets(nova_conf),
    )
    # The node's identity only: its provider tree is the driver's to report
    # to the agent built here (a reshape it asks for needs Placement), and
    # the pool, if the agent reads it, at the agent's first audit.
    views = nova_driver.read_nodes(providers=False)
    # The sharing provider's layout on RBD: DISK_GB from the pool, as under
    # the daemon (nova's layout: nova's driver's reading, _disk_pool_opts).
    driver = builder.with_disk_pool(conf, nova_driver)
    agent = builder.build_agent(
        conf,
        driver=driver,
        adapter=adapter,
        node_uuid=views[0].node_uuid if views else None,
    )
    driver.bind(seed=agent.root_figures, allocations=agent.tree_allocations)
    # Placement right within a second of a change, as under the daemon:
    # nova's periodic audit comes only once a minute. The prompt sync does
    # not read the host: nova's virt drivers query nova's database while
    # they answer get_available_resource, and a reading from another
    # thread in the middle of an API request is the lock-order hang
    # tests/nova/test_one_reading.py describes. The host is read by nova's
    # periodic, as before.
    soon = prompt.PromptSync(agent.sync_changed)
    # get_status carries the node's Placement sync state, as the daemon's
    # does: nova-compute's adapter reads the unknown consumers there
    # (rtagent.nova.leftovers).
    endpoint = AgentEndpoint(
        agent,
        host,
        conf.my_ip,
        on_change=soon.request,
        status_of=lambda tracker: status.node_status(
            tracker.snapshot(), {"placement": agent.sync_status().get(tracker.node_uuid)}
        ),
    )
    soon.start()
    return LocalLink(agent, endpoint, conf.my_ip, prompt=soon)
