"""Entry point for oslo-config-generator (namespace ``rtagent``)."""

from rtagent.conf import compute, daemon, default, health, libvirt, pci, placement, rtagent


def list_opts():
    """Return [(group, [opts])] for every rtagent option group."""
    result = []
    for module in (default, compute, libvirt, pci, placement, rtagent, daemon, health):
        result.extend(module.list_opts().items())
    return result
