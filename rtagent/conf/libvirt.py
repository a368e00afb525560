"""[libvirt]: how the host driver reaches the hypervisor."""

from oslo_config import cfg

GROUP = cfg.OptGroup("libvirt", title="libvirt host driver options")

ALL_OPTS = [
    cfg.StrOpt(
        "connection_uri",
        default="qemu:///system",
        help="libvirt connection URI. Use test:///ABSOLUTE/PATH/host.xml for "
        "libvirt's test driver (the demo does).",
    ),
    cfg.StrOpt(
        "instances_path",
        default="/var/lib/nova/instances",
        help="Directory where instance disks live (nova-compute's "
        "instances_path). It must exist; its filesystem's size is the "
        "DISK_GB total (floor of GiB). rtagent only measures it.",
    ),
]


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts: an OptGroup holds its options' values
    # and overrides, so sharing the module's one would leak between configs.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
