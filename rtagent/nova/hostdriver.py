# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A host driver over nova's virt driver interface.

For an agent embedded in nova-compute: nova's virt driver (libvirt, or the
fake drivers of nova's own tests) answers ``get_available_resource`` per
node, and owns node identity (the ``uuid`` it reports is the ComputeNode's
and the root provider's). In production beside a libvirt host, the rtagent
daemon audits libvirt itself and this module is not used.

What is read, per node the driver lists: the sizes (vCPUs, memory, disk)
and hypervisor facts of ``get_available_resource``, the capability traits
of ``capabilities_as_traits``, and what ``update_provider_tree`` puts on a
provider tree beyond the root's standard inventories (custom classes and
traits, child providers), which the agent publishes as the driver's.
Guests are not listed: nova's database says which instances are on the
node, and the tracker claims them from there, so there are no untracked
domains to count.
"""

import dataclasses
import json
import logging
import threading

from rtagent.nova import numa
from rtagent.pci import model as pci_model
from rtagent.virt import errors
from rtagent.virt.driver import HostDriver
from rtagent.virt.host import HostView, ProviderFacts

LOG = logging.getLogger(__name__)


class NovaHostDriver(HostDriver):
    """:param virt_driver: a ``nova.virt.driver.ComputeDriver``.
    :param local_node_uuid: callable() -> the host's node UUID, for a
        driver whose resources carry none (nova's persistent local id).
    :param cpu_sets: callable() -> ``(cpu_shared_set, cpu_dedicated_set)``
        as frozensets or None (nova.conf's, :func:`rtagent.nova.numa.cpu_sets`),
        read at each reading; None: neither set.
    """

    def __init__(self, virt_driver, local_node_uuid=None, cpu_sets=None):
        self._driver = virt_driver
        self._local_node_uuid = local_node_uuid
        self._cpu_sets = cpu_sets
        self._mutex = threading.Lock()
        self._resources = {}
        self._primed = {}
        # nodename -> the last reading of a node the driver does not list
        # (ironic's model as nova's tests mock it: each periodic names the
        # node it read).
        self._unlisted = {}
        # nodename -> (name, uuid, parent uuid) of each child provider the
        # driver reported at the last reading, parents first; and the
        # node's UUID.
        self._children = {}
        self._node_uuids = {}
        # Every trait update_provider_tree ever put on a root: one it stops
        # reporting is removed, as nova's tracker removes it.
        self._reported_traits = set()
        # provider UUID -> every aggregate the driver ever reported for it.
        self._reported_aggregates = {}
        # Set by bind(): the agent's figures for a node's root, and the
        # allocations on a node's tree in Placement (for a reshape).
        self._seed = None
        self._allocations = None

    def bind(self, seed, allocations):
        """Give the driver's ``update_provider_tree`` what nova's tracker
        gives it: the root's inventories as the agent publishes them, and
        the allocations of the node's tree when the driver asks for a
        reshape (``ReshapeNeeded``).

        :param seed: callable(HostView) -> {resource class: Placement
            inventory record}: the agent's inventories of the node's root
            for that reading, ratios as Placement holds them.
        :param allocations: callable(node UUID) -> {consumer: ``GET
            /allocations/{consumer}`` answer} of every consumer holding
            anything on the node's tree.
        """
        self._seed = seed
        self._allocations = allocations

    @property
    def managed_traits(self):
        # Every capability the driver can report, true or false, and every
        # trait it has reported: one that turns false or is no longer
        # reported is removed, and no other trait is touched.
        with self._mutex:
            reported = frozenset(self._reported_traits)
        return frozenset(self._capabilities()) | reported

    def resources(self, nodename):
        """What ``get_available_resource`` returned for ``nodename`` at the
        last reading (a copy), or None: the ComputeNode record's source."""
        with self._mutex:
            found = self._resources.get(nodename)
        return dict(found) if found is not None else None

    def prime(self, nodename, reading):
        """Hand over a ``get_available_resource`` reading of ``nodename``
        the caller took just now: the next :meth:`read_nodes` uses it
        instead of asking the driver again, once.

        nova's tracker reads the node for its ComputeNode record right
        before it has the agent audit; a second reading would cost the
        driver's work twice per periodic (the libvirt driver queries nova's
        database for it too).
        """
        with self._mutex:
            self._primed[nodename] = reading

    def published(self, node_uuid, tree):
        """The next reading hands the driver each child provider under the
        UUID it has in Placement. After a restart the driver makes up new
        UUIDs for the children it finds, while the sync keeps a child that
        has the name of one published before under its old UUID (and its
        allocations): without this, the driver would look a build's
        allocated provider up under a UUID Placement does not have."""
        in_placement = {p.name: p.uuid for p in tree if p.parent_uuid is not None}
        with self._mutex:
            for nodename, known in self._children.items():
                if self._node_uuids.get(nodename) != node_uuid:
                    continue
                renamed = {uuid: in_placement.get(name, uuid) for name, uuid, _ in known}
                self._children[nodename] = tuple(
                    (name, renamed[uuid], renamed.get(parent, parent))
                    for name, uuid, parent in known
                )

    def read_host(self):
        views = self.read_nodes()
        if not views:
            raise errors.HostReadError(what="nova virt driver", reason="it reports no node")
        return views[0]

    def read_nodes(self, providers=True):
        """One view per node the virt driver lists, sorted by name.

        :param providers: False: without asking the driver for its provider
            tree (only the nodes' identities are wanted, before the agent
            that would publish it exists).
        :raises HostReadError: the driver failed to answer.
        """
        return self._read(only=None, providers=providers)

    def read_node(self, nodename):
        """The view of the one node ``nodename``, or None if the driver no
        longer lists it: what nova's tracker asks of its driver at a claim.

        :raises HostReadError: the driver failed to answer.
        """
        views = self._read(only=nodename)
        return views[0] if views else None

    def _read(self, only, providers=True):
        with self._mutex:
            if only is None:
                primed, self._primed = self._primed, {}
            else:
                primed = {only: self._primed.pop(only)} if only in self._primed else {}
        try:
            readings = self._readings(only, primed)
            traits = frozenset(t for t, on in self._capabilities().items() if on)
            shared, dedicated = self._cpu_sets() if self._cpu_sets is not None else (None, None)
        except Exception as exc:
            raise errors.HostReadError(what="nova virt driver", reason=str(exc)) from exc
        views, kept = [], {}
        for name, reading in readings.items():
            if not reading:
                continue  # a node the driver no longer has
            res = dict(reading)
            if not res.get("uuid") and self._local_node_uuid is not None:
                res["uuid"] = self._local_node_uuid()
            view = view_of(name, res, traits, cpu_sets=(shared, dedicated))
            if providers:
                view = self._with_providers(view, dedicated)
            views.append(view)
            kept[view.hypervisor_hostname] = res
        with self._mutex:
            if only is None:
                self._resources = kept
            else:
                self._resources.update(kept)
        return views

    def _readings(self, only, primed):
        """nodename -> ``get_available_resource`` of each node to read
        (``only``, or all): ``primed`` ones as handed over, the others asked
        of the driver."""
        listed = set(self._driver.get_available_nodes())
        with self._mutex:
            # A node the driver does not list, whose reading nova's tracker
            # handed over (its periodic names each node): the node exists,
            # and keeps its last reading until the next.
            for name, reading in primed.items():
                if name not in listed:
                    self._unlisted[name] = reading
            for name in listed:
                self._unlisted.pop(name, None)
            unlisted = dict(self._unlisted)
        names = sorted(listed | set(unlisted))
        if only is not None:
            names = [name for name in names if name == only]
        known = {**unlisted, **primed}
        return {
            name: known[name] if name in known else self._driver.get_available_resource(name)
            for name in names
        }

    def _with_providers(self, view, dedicated):
        """``view`` with what the driver's ``update_provider_tree`` reports
        for its node (:meth:`_providers`)."""
        seed = self._seed(view) if self._seed is not None and view.node_uuid else None
        facts, moved = self._providers(view.hypervisor_hostname, view.node_uuid, dedicated, seed)
        return dataclasses.replace(
            view,
            providers=facts,
            driver_allocations=json.dumps(moved, sort_keys=True) if moved is not None else None,
        )

    def _providers(self, nodename, node_uuid, dedicated=None, seed=None):
        """What the driver's ``update_provider_tree`` reports for the node:
        (:class:`ProviderFacts` parents first, the allocations it moved or
        None).

        The root handed to the driver carries ``seed`` (the agent's figures,
        :meth:`bind`) or, without one, the PCPU inventory the agent derives
        from ``dedicated`` (``cpu_dedicated_set``), as the node's tree in
        Placement does: nova's libvirt driver asks for a reshape of VCPU to
        PCPU allocations when it sees pinned CPUs on a root without PCPU,
        which the agent performs itself, in the sync that adds PCPU
        (docs/numa.md, "Setting ``cpu_dedicated_set`` later").

        A driver that asks for a reshape (``ReshapeNeeded``) is called again
        with the allocations of the node's tree in Placement, as nova's
        tracker does at start-up; what it leaves in them is written with
        its tree in one ``POST /reshaper`` by the next sync.

        :raises HostReadError: the driver failed, asked for a reshape the
            agent cannot read allocations for, or reported an inventory
            without an integer total.
        """
        if node_uuid is None or not hasattr(self._driver, "update_provider_tree"):
            return (), None
        from nova import exception as nova_exception
        from nova.compute import provider_tree

        tree = provider_tree.ProviderTree()
        tree.new_root(nodename, node_uuid)
        with self._mutex:
            known = self._children.get(nodename, ())
        # The child providers of the last reading, under their UUIDs: a
        # virt driver finds a child by name and makes up a UUID only for a
        # new one, and nova's libvirt driver looks a build's allocated
        # providers up in the last tree it was handed (a vGPU's mdev), so a
        # second reading must not rename them. nova's report client hands
        # the driver its cached tree for the same reason.
        for name, uuid, parent_uuid in known:
            if parent_uuid == node_uuid or tree.exists(parent_uuid):
                tree.new_child(name, parent_uuid, uuid=uuid)
        if seed is not None:
            tree.update_inventory(nodename, seed)
        elif dedicated:
            tree.update_inventory(nodename, {"PCPU": _pcpu_inventory(len(dedicated))})
        what = f"update_provider_tree of node {nodename}"
        moved = None
        try:
            try:
                self._driver.update_provider_tree(tree, nodename)
            except nova_exception.ReshapeNeeded:
                if self._allocations is None:
                    raise
                LOG.info("The virt driver asks for a reshape of node %s's providers", nodename)
                read = self._allocations(node_uuid)
                moved = {c: _as_nova(body) for c, body in read.items()}
                self._driver.update_provider_tree(tree, nodename, allocations=moved)
                moved = {
                    c: dict(body, consumer_type=read[c].get("consumer_type"))
                    for c, body in moved.items()
                }
        except Exception as exc:
            # A driver error: the whole reading fails, so nothing in
            # Placement changes (a partial tree would retire the driver's
            # child providers).
            raise errors.HostReadError(what=what, reason=repr(exc)) from exc
        return self._facts(tree, nodename, node_uuid, seed), moved

    def _facts(self, tree, nodename, node_uuid, seed):
        """The :class:`ProviderFacts` of the driver's ``tree``, parents
        first. :raises HostReadError: an inventory has no integer total."""
        children = []
        facts = []
        for uuid in tree.get_provider_uuids():
            data = tree.data(uuid)
            for rc, record in data.inventory.items():
                if not isinstance(record, dict) or not isinstance(record.get("total"), int):
                    # Nothing of this reading reaches Placement.
                    raise errors.HostReadError(
                        what=f"update_provider_tree of node {nodename}",
                        reason=f"provider {data.name}: inventory of {rc} has no integer total",
                    )
            aggregates = frozenset(data.aggregates)
            with self._mutex:
                if data.uuid == node_uuid:
                    self._reported_traits |= set(data.traits)
                elif data.parent_uuid is not None:
                    children.append((data.name, data.uuid, data.parent_uuid))
                managed = self._reported_aggregates.setdefault(data.uuid, set())
                managed |= aggregates
                managed = frozenset(managed)
            facts.append(
                ProviderFacts(
                    uuid=data.uuid,
                    name=data.name,
                    parent_uuid=data.parent_uuid,
                    inventories=_records(data.inventory),
                    traits=frozenset(data.traits),
                    seeded=_records(seed) if seed is not None and data.uuid == node_uuid else None,
                    aggregates=aggregates,
                    managed_aggregates=managed,
                )
            )
        with self._mutex:
            self._children[nodename] = tuple(children)
            self._node_uuids[nodename] = node_uuid
        return tuple(facts)

    def _capabilities(self):
        as_traits = getattr(self._driver, "capabilities_as_traits", None)
        # COMPUTE_REMOTE_MANAGED_PORTS is granted by the agent only while
        # the node tracks remote-managed devices, as by nova's tracker.
        return dict(as_traits()) if as_traits is not None else {}


def _records(inventories):
    """Inventory records as :class:`ProviderFacts` holds them (hashable)."""
    return tuple(sorted((rc, tuple(sorted(rec.items()))) for rc, rec in inventories.items()))


def _as_nova(body):
    """A ``GET /allocations/{consumer}`` answer as nova's report client hands
    it to a virt driver for a reshape: the allocations' resources, the
    consumer generation, project and user."""
    return {
        "allocations": {
            rp: {"resources": dict(a["resources"])} for rp, a in body["allocations"].items()
        },
        "consumer_generation": body.get("consumer_generation"),
        "project_id": body.get("project_id"),
        "user_id": body.get("user_id"),
    }


def _pcpu_inventory(total):
    """The PCPU inventory the agent derives (rtagent.tracker.ledger)."""
    return {
        "total": total,
        "reserved": 0,
        "min_unit": 1,
        "max_unit": total,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }


def view_of(nodename, res, traits=frozenset(), providers=(), cpu_sets=(None, None)):
    """The :class:`HostView` of one node's ``get_available_resource`` dict.

    Its NUMA cells are the driver's ``numa_topology``
    (:func:`rtagent.nova.numa.host_cells`); ``cpu_sets`` is
    ``(cpu_shared_set, cpu_dedicated_set)``, each a frozenset or None.
    """
    try:
        cpu = json.loads(res.get("cpu_info") or "{}")
    except (TypeError, ValueError):
        cpu = {}
    if not isinstance(cpu, dict):
        cpu = {}
    supported = tuple(tuple(s) for s in res.get("supported_instances") or ())
    least = res.get("disk_available_least")
    return HostView(
        hypervisor_hostname=res.get("hypervisor_hostname") or nodename,
        hypervisor_type=str(res.get("hypervisor_type") or ""),
        hypervisor_version=int(res.get("hypervisor_version") or 0),
        vcpus=int(res["vcpus"]),
        memory_mb=int(res["memory_mb"]),
        local_gb=int(res["local_gb"]),
        local_gb_used=int(res.get("local_gb_used") or 0),
        disk_available_least=int(least) if least is not None else None,
        cpu_arch=str(cpu.get("arch") or ""),
        cpu_model=str(cpu.get("model") or ""),
        cpu_vendor=str(cpu.get("vendor") or ""),
        cpu_features=frozenset(cpu.get("features") or ()),
        traits=frozenset(traits),
        supported_instances=supported,
        providers=tuple(providers),
        node_uuid=res.get("uuid"),
        numa_cells=numa.host_cells(res.get("numa_topology")),
        cpu_shared_set=cpu_sets[0],
        cpu_dedicated_set=cpu_sets[1],
        pci_devices=pci_devices(res.get("pci_passthrough_devices")),
    )


def pci_devices(devices_json):
    """The :class:`~rtagent.pci.model.HostDevice` values of a reading's
    ``pci_passthrough_devices`` (nova's JSON list of device dicts), sorted
    by address. Types the agent does not track (mediated devices) and
    entries without an address or ids are left out; vDPA devices are kept
    (nova's ``vdpa`` type). The agent's ``[pci] device_spec`` decides which
    of the rest may be given.
    """
    if not devices_json:
        return ()
    try:
        listed = json.loads(devices_json) if isinstance(devices_json, str) else devices_json
    except ValueError:
        LOG.warning("pci_passthrough_devices of the virt driver is not JSON; no PCI device read")
        return ()
    found = {}
    for dev in listed if isinstance(listed, list) else ():
        if not isinstance(dev, dict) or dev.get("dev_type") not in pci_model.DEVICE_TYPES:
            continue
        try:
            address = str(dev["address"]).lower()
            vendor, product = str(dev["vendor_id"]).lower(), str(dev["product_id"]).lower()
        except KeyError:
            continue
        numa_node = dev.get("numa_node")
        parent = dev.get("parent_addr") if dev["dev_type"] in pci_model.CHILD_TYPES else None
        found[address] = pci_model.HostDevice(
            address=address,
            vendor_id=vendor,
            product_id=product,
            dev_type=dev["dev_type"],
            numa_node=numa_node if isinstance(numa_node, int) and numa_node >= 0 else None,
            parent_addr=str(parent).lower() if parent else None,
        )
    return tuple(found[a] for a in sorted(found))
