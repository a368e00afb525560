"""The virt driver under the test cloud's compute services (stock
``nova-compute`` and ``rtagent-nova-compute`` alike): nova's own
``fake.FakeDriverWithoutFakeNodes`` (one node named after ``[DEFAULT] host``,
with nova's persistent node identity), with two changes:

- it reports the sizes of the host the host's rtagent agent audits, read the
  way the agent reads them (online CPUs and memory from the libvirt URI in
  nova.conf's ``[libvirt] connection_uri``, disk from ``statvfs`` of
  ``[DEFAULT] instances_path``), where nova's fake reports 1000 vCPUs and
  800,000 MB; os-hypervisors and Placement then describe the same host;
- after a live migration the source forgets the guest, as nova's
  ``FakeLiveMigrateDriver`` does (nova's plain fake keeps it, and a later
  evacuation back then fails with ``InstanceExists``).

nova loads ``compute_driver`` from ``nova.virt`` only; tests/cloud/site's
sitecustomize makes this module ``nova.virt.rtagent_cloud`` in the
processes the test starts.
"""

import os

import libvirt
from nova import conf
from nova.virt import fake

CONF = conf.CONF
GIB = 2**30


def host_sizes(uri, instances_path):
    """``(vcpus, memory_mb, local_gb)`` of the host at ``uri``: online CPUs,
    memory in MiB (libvirt's getInfo), and the size in GiB (rounded down) of
    the filesystem holding ``instances_path``."""
    libvirt.registerErrorHandler(lambda *_: None, None)
    conn = libvirt.open(uri)
    try:
        online = sum(1 for up in conn.getCPUMap()[1] if up)
        memory_mb = conn.getInfo()[1]
    finally:
        conn.close()
    st = os.statvfs(instances_path)
    return online, memory_mb, (st.f_frsize or st.f_bsize) * st.f_blocks // GIB


class CloudFakeDriver(fake.FakeDriverWithoutFakeNodes):
    def __init__(self, virtapi, read_only=False):
        self.vcpus, self.memory_mb, self.local_gb = host_sizes(
            CONF.libvirt.connection_uri, CONF.instances_path
        )
        super().__init__(virtapi, read_only)

    def post_live_migration(self, context, instance, block_device_info, migrate_data=None):
        # Runs on the source once the guest runs on the destination.
        self.destroy(context, instance, network_info=None, block_device_info=block_device_info)
