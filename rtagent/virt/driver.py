"""The host-driver interface the agent audits through.

A driver reads; it never changes the host. ``read_host`` is called outside the
tracker lock, once per audit, and must cost the hypervisor a bounded number of
calls whatever the number of domains. Host metrics (nova's ``compute_monitors``)
are read in the same pass and travel in ``HostView.metrics``, the host's PCI
devices in ``HostView.pci_devices``; a driver without them leaves those empty.
"""

import abc


class HostDriver(abc.ABC):
    """Reads the host's resources and domains."""

    @abc.abstractmethod
    def read_host(self):
        """Return a :class:`rtagent.virt.host.HostView` for this host.

        :raises rtagent.virt.errors.HypervisorUnavailable: the hypervisor
            could not be reached; the caller keeps its previous view.
        :raises rtagent.virt.errors.HostReadError: a fact could not be read.
        """

    @property
    def managed_traits(self):
        """Every trait this driver could report: one it stops reporting is
        removed from Placement, and no trait outside this set is touched."""
        return frozenset()

    def read_nodes(self):
        """Every node this host reports, as a list of HostView.

        A libvirt host is one node; drivers that manage several (nova's
        ironic, for instance) return one view per node, told apart by
        ``hypervisor_hostname``.
        """
        return [self.read_host()]

    def published(self, node_uuid, tree):  # noqa: B027 - optional hook
        """Placement now holds ``tree`` (a
        :class:`~rtagent.placement.tree.ProviderTree`) for node
        ``node_uuid``: for a driver that hands its hypervisor layer a
        provider tree to fill in, the UUIDs its child providers have in
        Placement. Most drivers need nothing from it."""

    def close(self):  # noqa: B027 - optional hook; drivers without connections keep it
        """Release connections. Safe to call more than once."""
