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
        "DISK_GB total (floor of GiB), except with images_type = rbd. "
        "rtagent only measures it.",
    ),
    cfg.StrOpt(
        "images_type",
        default="default",
        choices=("default", "raw", "flat", "qcow2", "rbd"),
        help="Where the guests' disks live (nova's option). rbd: in the Ceph "
        "pool images_rbd_pool, whose capacity and usage are DISK_GB "
        "(docs/rbd.md); any other value: files under instances_path. nova's "
        "lvm and ploop are not supported.",
    ),
    cfg.StrOpt(
        "images_rbd_pool",
        default="rbd",
        help="The RADOS pool the guests' disks are in (nova's option), with images_type = rbd.",
    ),
    cfg.StrOpt(
        "images_rbd_ceph_conf",
        default="",
        help="The Ceph configuration file (nova's option); empty: "
        "/etc/ceph/ceph.conf. It must exist and be readable.",
    ),
    cfg.StrOpt(
        "rbd_user",
        help="The RADOS client name, without 'client.' (nova's option); unset: "
        "librados' default (client.admin), with the keyring ceph.conf names.",
    ),
    cfg.IntOpt(
        "rbd_connect_timeout",
        default=5,
        min=1,
        help="Seconds a reading of the pool may take (nova's option bounds the "
        "connection; here it bounds the whole reading): past it the audit "
        "keeps the last figures and reports them stale.",
    ),
    cfg.BoolOpt(
        "images_rbd_disk_on_each_root",
        default=False,
        help="With images_type = rbd: publish the pool's DISK_GB on every "
        "host's root provider, as stock nova does (the cluster's raw size "
        "on each host, so Placement sees the pool once per host). False: "
        "once, on a sharing provider in an aggregate with the hosts' roots "
        "(docs/rbd.md says which to choose and how to move).",
    ),
]

# nova's default when images_rbd_ceph_conf is empty (librados' own).
DEFAULT_CEPH_CONF = "/etc/ceph/ceph.conf"


def ceph_conf(conf):
    """The ceph.conf path ``conf`` names (nova's empty default resolved)."""
    return conf.libvirt.images_rbd_ceph_conf or DEFAULT_CEPH_CONF


def register_opts(conf):
    # A fresh OptGroup per ConfigOpts: an OptGroup holds its options' values
    # and overrides, so sharing the module's one would leak between configs.
    conf.register_group(cfg.OptGroup(GROUP.name, title=GROUP.title))
    conf.register_opts(ALL_OPTS, group=GROUP.name)


def list_opts():
    return {GROUP: ALL_OPTS}
