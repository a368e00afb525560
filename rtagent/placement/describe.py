"""What a sync changes in Placement, in words for the log.

``Placement updated: SetInventories(<uuid>)`` told an operator that
something changed, not what. These describe each operation against the
view it was computed from (the provider as Placement held it): which
inventory fields of which classes went from what to what, which traits
were added and removed. Pure functions over plain values.
"""

from rtagent.placement import diff as diffmod

_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size", "allocation_ratio")


def describe(op, before):
    """One operation as text, e.g. ``SetInventories(<uuid>: VCPU
    allocation_ratio 16.0->20.0)`` or ``SetTraits(<uuid>: +A -B)``.

    :param op: a :mod:`rtagent.placement.diff` operation.
    :param before: the :class:`~rtagent.placement.tree.ProviderTree` the
        operation was computed against.
    """
    current = before.get(op.uuid)
    name = type(op).__name__
    if isinstance(op, diffmod.CreateProvider):
        parent = f" under {op.parent_uuid}" if op.parent_uuid else ""
        return f"{name}({op.uuid} {op.name!r}{parent})"
    if isinstance(op, diffmod.UpdateProvider):
        old = f"{current.name!r}->" if current is not None else ""
        return f"{name}({op.uuid}: name {old}{op.name!r})"
    if isinstance(op, diffmod.SetInventories):
        old = current.inventories if current is not None else {}
        return f"{name}({op.uuid}: {inventory_changes(old, op.inventories)})"
    if isinstance(op, diffmod.SetTraits):
        old = current.traits if current is not None else frozenset()
        return f"{name}({op.uuid}: {trait_changes(old, op.traits)})"
    if isinstance(op, diffmod.SetAggregates):
        old = (current.aggregates if current is not None else None) or frozenset()
        return f"{name}({op.uuid}: {trait_changes(old, op.aggregates)})"
    return f"{name}({op.uuid})"


def inventory_changes(old, new):
    """``VCPU total 8->12 allocation_ratio 4.0->16.0, +DISK_GB total=100 ...,
    -CUSTOM_X``: what differs between two inventory sets.

    :param old: {resource class: :class:`~rtagent.resources.Inventory`}.
    :param new: {resource class: Placement inventory dict}.
    """
    parts = []
    for rc in sorted(set(old) | set(new)):
        if rc not in new:
            parts.append(f"-{rc}")
        elif rc not in old:
            fields = " ".join(f"{f}={new[rc].get(f)}" for f in _FIELDS if f in new[rc])
            parts.append(f"+{rc} {fields}")
        else:
            moved = [
                f"{f} {getattr(old[rc], f)}->{new[rc][f]}"
                for f in _FIELDS
                if f in new[rc] and getattr(old[rc], f) != new[rc][f]
            ]
            if moved:
                parts.append(f"{rc} {' '.join(moved)}")
    return ", ".join(parts) or "no field changed"


def trait_changes(old, new):
    """``+COMPUTE_STATUS_DISABLED -HW_CPU_X86_AVX``: traits added, removed."""
    added = [f"+{t}" for t in sorted(new - old)]
    removed = [f"-{t}" for t in sorted(old - new)]
    return " ".join(added + removed) or "no trait changed"


def refresh_decision(old_view, new_view):
    """Why a sync read what it read: the providers whose generation matched
    the cache (reused) and those it re-read (generation moved, or not
    cached). For the debug log."""
    reused, reread = [], []
    for provider in new_view:
        cached = old_view.get(provider.uuid)
        if cached is not None and cached.generation == provider.generation:
            reused.append(provider.uuid)
        else:
            was = "uncached" if cached is None else f"generation {cached.generation}"
            reread.append(f"{provider.uuid} ({was}->{provider.generation})")
    text = f"{len(reused)} provider(s) unchanged"
    if reread:
        text += f", re-read {', '.join(reread)}"
    return text
