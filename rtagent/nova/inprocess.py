# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""An rtagent agent inside nova-compute's process (nova's functional tests,
and a single-process deployment): built from nova's configuration, auditing
through nova's virt driver, reached through its RPC endpoint's methods.
"""

import logging

from rtagent import conf as rtconf
from rtagent.nova import numa
from rtagent.nova.hostdriver import NovaHostDriver
from rtagent.nova.link import LocalLink
from rtagent.placement import prompt
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
    return conf


def local_link(nova_conf, host, virt_driver, *, adapter, state_path, local_node_uuid=None):
    """A :class:`LocalLink` to a new agent over ``virt_driver``.

    :param adapter: a keystoneauth1 Adapter to Placement.
    :param state_path: the agent's own state directory (created if missing).
    :param local_node_uuid: callable() -> the host's node UUID for drivers
        whose resources carry none (nova's ``get_local_node_uuid``).
    """
    conf = agent_conf(nova_conf, host, state_path)
    driver = NovaHostDriver(
        virt_driver,
        local_node_uuid=local_node_uuid,
        cpu_sets=lambda: numa.cpu_sets(nova_conf),
    )
    # The node's identity only: its provider tree is the driver's to report
    # to the agent built here (a reshape it asks for needs Placement). DISK_GB
    # is nova's driver's reading, RBD or not (docs/rbd.md, "Not built yet").
    views = driver.read_nodes(providers=False)
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
    endpoint = AgentEndpoint(agent, host, conf.my_ip, on_change=soon.request)
    soon.start()
    return LocalLink(agent, endpoint, conf.my_ip, prompt=soon)
