"""Configuration: one module per option group, registered on a ConfigOpts
that the caller owns and passes in (no global CONF inside the core)."""

from oslo_config import cfg

from rtagent.conf import compute, daemon, default, health, libvirt, pci, placement, rtagent

_GROUP_MODULES = (default, compute, libvirt, pci, placement, rtagent, daemon, health)


def register_opts(conf):
    """Register every rtagent option group on ``conf``."""
    for module in _GROUP_MODULES:
        module.register_opts(conf)


def new_conf():
    """Return a fresh ConfigOpts with all rtagent options registered."""
    conf = cfg.ConfigOpts()
    register_opts(conf)
    return conf
