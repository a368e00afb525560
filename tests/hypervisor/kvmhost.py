"""A compute host of the test cloud on a real hypervisor: a private libvirtd
(``rtagent.testing.libvirtd``) in a UTS namespace named after the host,
nova's own ``libvirt.LibvirtDriver`` starting real QEMU guests in it
(``virt_type = kvm`` where /dev/kvm exists, ``qemu`` elsewhere), and
``rtagent run`` auditing the same daemon. ../shared/recipes/real-hypervisor.md
lists what it takes; each setting below says why it is there.
"""

import os

from rtagent.testing.libvirtd import Libvirtd
from tests.cloud.control import ACCOUNTING, BIN
from tests.cloud.hosts import Host

# 2 CPUs here: CPU 1 for pinned guests, CPU 0 shared by the others.
CPU_DEDICATED_SET = "1"
CPU_SHARED_SET = "0"
# One shared CPU holds the unpinned guests of the scenario, a same-host
# resize holding both its flavors included.
CPU_ALLOCATION_RATIO = "16.0"
# Seconds before rtagent-nova-compute gives up on an absent daemon: a boot
# or a delete while it is down waits this long (nova's default is 60).
RPC_TIMEOUT_S = 10
# A guest without an OS never answers ACPI: nova's 60 s default would make
# every stop and resize wait a minute before it powers the guest off.
SHUTDOWN_TIMEOUT_S = 5


def virt_type():
    """``kvm`` where this machine can run KVM guests, ``qemu`` (TCG) elsewhere."""
    return "kvm" if os.access("/dev/kvm", os.R_OK | os.W_OK) else "qemu"


class KvmHost(Host):
    """A cloud host whose hypervisor is a real libvirtd with QEMU guests."""

    # nova's LibvirtDriver reports the host's ``uptime`` output in stats.
    DRIVER_STATS = ("uptime",)

    def __init__(self, name, control, workdir):
        self.libvirtd = Libvirtd(
            os.path.join(workdir, name, "libvirtd"), hostname=name, owns_every_domain=True
        )
        os.makedirs(self.libvirtd.dir, exist_ok=True)
        super().__init__(name, control, workdir)

    def _agent_sections(self):
        sections = super()._agent_sections()
        sections["DEFAULT"].update(self._accounting())
        sections["compute"] = {
            "cpu_dedicated_set": CPU_DEDICATED_SET,
            "cpu_shared_set": CPU_SHARED_SET,
        }
        # Read-write, as docs/libvirt-audit.md says (libvirt answers no
        # domain capabilities on a read-only connection: no COMPUTE_*
        # traits); the agent calls no mutating API.
        sections["libvirt"]["connection_uri"] = self.libvirtd.uri
        return sections

    def _accounting(self):
        return {**ACCOUNTING, "cpu_allocation_ratio": CPU_ALLOCATION_RATIO}

    def _write_nova_conf(self, on_rtagent):
        # There is no sudo or rootwrap here and the service runs as root:
        # every privsep context nova and its libraries use starts the venv's
        # helper directly.
        helper = {"helper_command": f"{BIN}/privsep-helper --config-file {self.nova_conf}"}
        extra = {
            "DEFAULT": {
                "compute_driver": "libvirt.LibvirtDriver",
                "instances_path": self.instances,
                "shutdown_timeout": str(SHUTDOWN_TIMEOUT_S),
                **self._accounting(),
            },
            # QEMU's own CPU model: a nested KVM may refuse the host's
            # (seen here, on an AMD EPYC guest: "failed to set MSR 0x10a"
            # for host-model and host-passthrough alike).
            "libvirt": {
                "virt_type": virt_type(),
                "cpu_mode": "none",
                "connection_uri": self.libvirtd.uri,
                **self._nova_libvirt_extra(),
            },
            "compute": {
                "cpu_dedicated_set": CPU_DEDICATED_SET,
                "cpu_shared_set": CPU_SHARED_SET,
            },
            "vnc": {"enabled": "false"},
            "nova_sys_admin": helper,
            "privsep_osbrick": helper,
            "vif_plug_ovs_privileged": helper,
            "vif_plug_linux_bridge_privileged": helper,
        }
        if on_rtagent:
            extra["rtagent"] = {
                "agent_config_file": self.agent_conf,
                "rpc_timeout": str(RPC_TIMEOUT_S),
            }
        self.control.write_nova_conf(self.nova_conf, self.name, self.nova_state, extra)

    def _nova_libvirt_extra(self):
        """More of nova.conf's ``[libvirt]`` (a host on RBD adds its pool)."""
        return {}

    def start_on_rtagent(self):
        self.libvirtd.start()
        super().start_on_rtagent()

    def stop(self):
        """Stop the services, then libvirtd: every guest destroyed and
        undefined, its QEMU process killed by PID if it did not go."""
        try:
            return super().stop()
        finally:
            self.libvirtd.stop()
