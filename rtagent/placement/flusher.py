"""Write diff operations (:mod:`.diff`) to Placement.

Operations are applied provider by provider, each write checked against the
provider's generation. A generation conflict on one provider re-reads only
that provider, re-diffs it and writes again under the one
:class:`~rtagent.placement.retry.RetryPolicy`, so the window between read
and write stays a few requests long. When a resource class moves between
providers that have allocations on it, or a class new to a provider must be
given to the consumers that already hold it, the operations go together
through ``POST /reshaper`` instead (:mod:`.reshape`).

The view is updated only from Placement's answers to successful writes. A
write whose answer was lost (Placement unreachable half-way) leaves its
outcome unknown: :attr:`Flusher.outcome_unknown` says so, and the sync then
trusts nothing cached.
"""

import dataclasses
import logging

from rtagent.placement import diff as diffmod
from rtagent.placement import errors, reader, reshape
from rtagent.placement.seen import Listed
from rtagent.placement.tree import Provider, ProviderTree
from rtagent.resources import Inventory, frozen_map

# The sync's logger: these lines are part of what an operator reads as the
# sync (docs/operations.md), whichever module now writes them.
LOG = logging.getLogger("rtagent.placement.sync")

_CONFLICTS = (errors.GenerationConflict, errors.ProviderChanging)


@dataclasses.dataclass(frozen=True)
class Flushed:
    """What one flush did besides the operations: the class moves and the
    consumers seeded by its reshape (none without one), and how many
    provider conflicts it retried."""

    moves: tuple = ()
    seeded: tuple = ()
    retried: int = 0


class Flusher:
    """Applies operations to Placement; one per ProviderSync, used by one
    thread.

    :param created: callable(uuid) told of each child provider created, at
        once (before the next write).
    """

    def __init__(self, client, policy, sleep, rng, created):
        self._client = client
        self._policy = policy
        self._sleep = sleep
        self._rng = rng
        self._created = created
        # Custom traits and classes known to exist in Placement (created by
        # us): each costs one PUT, once per process.
        # Two sets: Placement keeps traits and classes apart, and one name
        # may be both (nova's provider-config tests name them alike).
        self._known_traits = set()
        self._known_classes = set()
        # Placement as the answered writes of the last flush left it; kept
        # when a flush fails half-way, as those writes are real.
        self.view = None
        # Set when a write was sent and no answer came; cleared by the sync
        # that reads it (clear_outcome).
        self.outcome_unknown = False

    def flush(self, view, ops, desired, root, held, *, driver_allocations=None):
        """Make Placement, as ``view`` holds it, hold ``desired`` by ``ops``.

        :param held: {consumer: {provider: {class: amount}}}: what the
            node's claims hold by local accounting. Where a provider gains a
            class (PCI reporting turned on), the consumers that already hold
            some of it are given their allocations in the same
            ``POST /reshaper`` that adds it (:func:`.reshape.seeded`).
        :param driver_allocations: {consumer: {"allocations": {provider:
            {"resources": {...}}}, ...}}: the allocations a virt driver
            moved for this tree (nova's ``ReshapeNeeded``), or None. They
            are written with every inventory the operations set, in one
            ``POST /reshaper``, instead of the moves the agent would infer.
        :returns: a :class:`Flushed`; :attr:`view` is the view after.
        :raises SyncConflictsExhausted: a provider's conflicts outlasted the
            policy.
        :raises GenerationConflict: the reshape conflicted (retry the sync).
        """
        self.view = view
        if driver_allocations:
            return self._driver_reshape(ops, driver_allocations)
        found = reshape.moves(desired, view.tree, ops)
        bodies = reshape.moved_allocations(self._client, found) if found else {}
        seeds = reshape.seeded(view.tree, ops, held)
        if seeds:
            bodies = reshape.with_seeded(self._client, bodies, seeds, root)
            seeds = {c: a for c, a in seeds.items() if c in bodies}
        if not bodies:
            return Flushed(retried=self._apply_by_provider(root, ops, desired))
        touched = reshape.involved(found) | {rp for a in seeds.values() for rp in a}
        self._reshape(ops, touched, bodies)
        LOG.info(
            "Reshaped provider tree: %s",
            "; ".join(
                [f"moved {m.resource_class} {m.source}->{m.dest}" for m in found]
                + [f"added {seeds[c]} to consumer {c}" for c in sorted(seeds)]
            ),
        )
        return Flushed(moves=tuple(found), seeded=tuple(sorted(seeds)))

    def _driver_reshape(self, ops, allocations):
        """Write ``ops`` with the driver's ``allocations``: every inventory
        the operations set goes with them in one ``POST /reshaper`` (the
        driver may move a class to several providers, which the agent's own
        rule (:func:`.reshape.moves`) does not infer)."""
        bodies = reshape.driver_bodies(allocations)
        touched = {op.uuid for op in ops if isinstance(op, diffmod.SetInventories)}
        self._reshape(ops, touched, bodies)
        LOG.info(
            "Reshaped provider tree as the virt driver asked: allocations of %d consumer(s) "
            "rewritten with the inventories of %d provider(s)",
            len(bodies),
            len(touched),
        )
        return Flushed(moves=(), seeded=tuple(sorted(bodies)))

    def send(self, call, *args):
        """``call(*args)``, one write to Placement; an answer lost on the way
        (PlacementUnavailable) leaves its outcome unknown."""
        try:
            return call(*args)
        except errors.PlacementUnavailable:
            self.outcome_unknown = True
            raise

    def clear_outcome(self):
        """Start afresh: every write sent so far has been accounted for."""
        self.outcome_unknown = False

    def _apply_by_provider(self, root, ops, desired):
        """Apply ``ops`` provider by provider; :returns: conflicts retried.

        A generation conflict on one provider re-reads only that provider
        (inventories and traits, two GETs), re-diffs it and writes again,
        under the same retry policy. The window between our read and our
        write stays a few requests long, so the agent still gets through
        when others write to its providers several times a second.
        """
        retried = 0
        groups = {}
        for op in ops:
            groups.setdefault(op.uuid, []).append(op)
        for uuid, group in groups.items():

            def apply(number, uuid=uuid, group=group):
                nonlocal retried
                if number > 1:
                    retried += 1
                    cached = self.view.get(uuid)
                    fresh = reader.read_provider(
                        self._client,
                        Listed(uuid, cached.name, None, cached.parent_uuid),
                        aggregates=reader.manages_aggregates(desired.get(uuid)),
                    )
                    self.view = self.view.with_provider(fresh)
                    group = diffmod.diff(ProviderTree([desired.get(uuid)]), ProviderTree([fresh]))
                for op in group:
                    self._apply(op)

            def on_conflict(exc, number, uuid=uuid):
                LOG.info("Generation conflict on provider %s (try %d), re-reading it", uuid, number)

            self._policy.call(
                apply,
                retry_on=_CONFLICTS,
                on_retry=on_conflict,
                exhausted=lambda exc, n: errors.SyncConflictsExhausted(root=root, attempts=n),
                sleep=self._sleep,
                rng=self._rng,
            )
        return retried

    def _apply(self, op):
        """Write ``op`` and cache the provider as Placement answered it."""
        current = self.view.get(op.uuid)
        if isinstance(op, diffmod.CreateProvider):
            generation = self._named(self._client.create_provider, op)
            provider = Provider(
                op.uuid, op.name, op.parent_uuid, generation, aggregates=frozenset()
            )
            if op.parent_uuid is not None:
                # Remembered at once: should a later write of this sync fail,
                # the child is still known as ours (its name is taken now).
                self._created(op.uuid)
        elif isinstance(op, diffmod.UpdateProvider):
            generation = self._named(self._client.update_provider, op)
            provider = current.replace(
                name=op.name, parent_uuid=op.parent_uuid, generation=generation
            )
        elif isinstance(op, diffmod.SetInventories):
            self._ensure_classes(op, current)
            generation = self.send(
                self._client.put_inventories, op.uuid, current.generation, op.inventories
            )
            provider = current.replace(
                generation=generation,
                inventories=frozen_map(
                    {rc: Inventory.from_placement(d) for rc, d in op.inventories.items()}
                ),
            )
        elif isinstance(op, diffmod.SetAggregates):
            generation = self.send(
                self._client.put_aggregates, op.uuid, current.generation, op.aggregates
            )
            provider = current.replace(generation=generation, aggregates=op.aggregates)
        else:
            self._ensure_custom(
                op.traits - current.traits, self._client.ensure_trait, self._known_traits
            )
            generation = self.send(self._client.put_traits, op.uuid, current.generation, op.traits)
            provider = current.replace(generation=generation, traits=op.traits)
        self.view = self.view.with_provider(provider)

    def _named(self, call, op):
        """Create or rename a provider; :returns: its generation.

        :raises ProviderNameTaken: another provider has the name."""
        try:
            return self.send(call, op.uuid, op.name, op.parent_uuid)
        except errors.DuplicateProviderName as exc:
            raise errors.ProviderNameTaken(name=op.name, uuid=op.uuid) from exc

    def _reshape(self, ops, touched, bodies):
        """Apply ``ops``, the ``touched`` providers' inventories and the new
        allocations (``bodies``) together through ``POST /reshaper``."""
        held = [op for op in ops if isinstance(op, diffmod.SetInventories) and op.uuid in touched]
        for op in ops:
            if op not in held:
                self._apply(op)
        payload = {}
        for op in held:
            current = self.view.get(op.uuid)
            self._ensure_classes(op, current)
            payload[op.uuid] = {
                "resource_provider_generation": current.generation,
                "inventories": op.inventories,
            }
        try:
            self.send(self._client.reshape, payload, bodies)
        finally:
            # Reshaper answers no generations: re-read those providers next.
            for uuid in touched:
                self.view = self.view.without(uuid)

    def _ensure_classes(self, op, current):
        """Create the custom classes ``op`` (SetInventories) adds."""
        added = set(op.inventories) - set(current.inventories)
        self._ensure_custom(added, self._client.ensure_resource_class, self._known_classes)

    def _ensure_custom(self, names, create, known):
        """Create the custom names among ``names`` not in ``known`` (the
        traits or the classes known to exist)."""
        for name in sorted(names):
            if name.startswith("CUSTOM_") and name not in known:
                self.send(create, name)
                known.add(name)
