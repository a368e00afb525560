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
  evacuation back then fails with ``InstanceExists``);
- where ``RTAGENT_CLOUD_GATES`` names a directory, a step a test has armed
  there (spawn, migrate_disk_and_power_off, live_migration,
  confirm_migration) waits, with a log line, until the test opens it
  (tests/faults/gates.py): a real guest's steps take seconds and the fake's
  none, and a fault test needs the step under way when its fault lands.

nova loads ``compute_driver`` from ``nova.virt`` only; tests/cloud/site's
sitecustomize makes this module ``nova.virt.rtagent_cloud`` in the
processes the test starts.
"""

import logging
import os
import time

import libvirt
from nova import conf
from nova.virt import fake

CONF = conf.CONF
GIB = 2**30
LOG = logging.getLogger(__name__)
GATES_ENV = "RTAGENT_CLOUD_GATES"
# A gate nobody opens lets the step go on after this long (a test that
# died must not leave a compute service waiting forever).
GATE_BOUND_S = 600


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

    def spawn(self, context, instance, *args, **kwargs):
        gate("spawn", instance.uuid)
        return super().spawn(context, instance, *args, **kwargs)

    def migrate_disk_and_power_off(self, context, instance, *args, **kwargs):
        gate("migrate_disk_and_power_off", instance.uuid)
        return super().migrate_disk_and_power_off(context, instance, *args, **kwargs)

    def live_migration(self, context, instance, *args, **kwargs):
        gate("live_migration", instance.uuid)
        return super().live_migration(context, instance, *args, **kwargs)

    def confirm_migration(self, context, migration, instance, network_info):
        gate("confirm_migration", instance.uuid)
        return super().confirm_migration(context, migration, instance, network_info)

    def post_live_migration(self, context, instance, block_device_info, migrate_data=None):
        # Runs on the source once the guest runs on the destination.
        self.destroy(context, instance, network_info=None, block_device_info=block_device_info)


def gate(step, instance_uuid):
    """Wait at ``step`` if a test armed it: ``STEP.armed`` in the gates
    directory (taken by the first instance to come, so a gate holds one
    step), until ``STEP.open`` appears (removed again)."""
    where = os.environ.get(GATES_ENV)
    if not where:
        return
    armed = os.path.join(where, f"{step}.armed")
    try:
        os.unlink(armed)
    except FileNotFoundError:
        return
    opened = os.path.join(where, f"{step}.open")
    LOG.warning("cloud gate %s: instance %s waits", step, instance_uuid)
    deadline = time.monotonic() + GATE_BOUND_S
    while not os.path.exists(opened) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        os.unlink(opened)
    except FileNotFoundError:
        pass
    LOG.warning("cloud gate %s: instance %s goes on", step, instance_uuid)
