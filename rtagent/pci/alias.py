# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""``[pci] alias``: named PCI device requests for flavors
(``pci_passthrough:alias``), with nova's meaning (``nova.pci.request``).

Each option value is one JSON object: ``name`` (required), ``vendor_id``
and ``product_id`` (4 hex digits), ``device_type`` (type-PCI, type-PF,
type-VF), ``numa_policy`` (legacy by default), ``resource_class``,
``traits`` (comma-separated) and ``live_migratable``, all strings; any other
key is refused. A name given again adds an alternative (OR, in order); as
nova, every entry of a repeated name must state the same ``device_type`` and
have the same ``numa_policy``. Without ``[filter_scheduler]
pci_in_placement`` every entry needs ``vendor_id`` and ``product_id``; with
it, those or ``resource_class``, and a name may not repeat.

Stricter than nova, on purpose: ``capability_type`` (nova accepts it, then
no device ever matches), a name that is blank or holds ``,`` or ``:`` (a
flavor cannot ask for it), an empty ``resource_class`` or ``traits``, and a
resource class or trait that Placement would refuse.
"""

import dataclasses
import re
import types

from rtagent.excerpt import excerpt
from rtagent.pci import jsonvalue, model, spec
from rtagent.pci.errors import InvalidAlias
from rtagent.pci.model import LEGACY, NUMA_POLICIES

KEYS = (
    "name",
    "vendor_id",
    "product_id",
    "device_type",
    "numa_policy",
    "resource_class",
    "traits",
    "live_migratable",
)
_ID = re.compile(r"^[0-9a-fA-F]{4}$")
_NAME_MAX = 256


@dataclasses.dataclass(frozen=True)
class Alias:
    """One alias entry; ``entry`` is the position of its option value. None
    (or no traits) means the field was not given."""

    name: str
    entry: int
    vendor_id: str | None = None
    product_id: str | None = None
    device_type: str | None = None
    numa_policy: str = LEGACY
    resource_class: str | None = None
    traits: tuple = ()
    live_migratable: bool | None = None

    @property
    def requested_resource_class(self):
        """The class nova asks Placement for: the alias's, else
        ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``; None without either."""
        if self.resource_class or not (self.vendor_id and self.product_id):
            return self.resource_class
        return f"CUSTOM_PCI_{self.vendor_id}_{self.product_id}".upper()

    def request_spec(self):
        """This entry as a spec of nova's ``InstancePCIRequest`` (what
        :class:`~rtagent.pci.pools.PciRequest` takes): the fields given,
        ``device_type`` as ``dev_type``, booleans and traits as strings."""
        values = {
            "vendor_id": self.vendor_id,
            "product_id": self.product_id,
            "dev_type": self.device_type,
            "resource_class": self.resource_class,
            "traits": ",".join(self.traits) or None,
            "live_migratable": None
            if self.live_migratable is None
            else str(self.live_migratable).lower(),
        }
        return {key: value for key, value in values.items() if value is not None}

    def matches(self, device, tags, in_placement=False):
        """Whether ``device`` (a :class:`~rtagent.pci.model.HostDevice`) with
        the ``tags`` of its device spec satisfies this entry.

        As nova's PCI claim: the ids and type given must be equal; a PF only
        when type-PF is asked; a remote-managed device never (an alias cannot
        ask for one); ``live_migratable``, when given, equal to the device's
        tag (a device without the tag matches neither value). With
        ``in_placement``, also as Placement would: the device is reported
        (no physical_network), has the requested resource class and every
        trait asked.
        """
        wanted = (self.vendor_id, self.product_id, self.device_type)
        found = (device.vendor_id.lower(), device.product_id.lower(), device.dev_type)
        if any(w is not None and w != f for w, f in zip(wanted, found, strict=True)):
            return False
        if device.dev_type == model.TYPE_PF and self.device_type != model.TYPE_PF:
            return False
        if tags.get("remote_managed"):
            return False
        if self.live_migratable is not None and tags.get("live_migratable") != self.live_migratable:
            return False
        if not in_placement:
            return True
        return (
            "physical_network" not in tags
            and self.requested_resource_class in (None, spec.resource_class_of(device, tags))
            and set(self.traits) <= spec.traits_of(device, tags)
        )


def match(entries, device, tags, in_placement=False):
    """The first of an alias's ``entries`` that ``device`` satisfies, or
    None (the entries of one name are alternatives)."""
    return next((a for a in entries if a.matches(device, tags, in_placement)), None)


def parse_aliases(values, in_placement=False):
    """The ``[pci] alias`` values (JSON strings) as a read-only mapping of
    name to its entries (a tuple of :class:`Alias`, in order).

    :param in_placement: nova's ``[filter_scheduler] pci_in_placement``.
    :raises InvalidAlias: an entry or a field of one is invalid, or entries
        of one name disagree.
    """
    aliases = {}
    for entry, text in enumerate(values):
        alias = _alias(entry, text)
        first = aliases.get(alias.name, (None,))[0]
        if in_placement:
            if first is not None:
                raise InvalidAlias(
                    entry,
                    "name",
                    f"{alias.name!r} repeats entry {first.entry}"
                    " (one entry per name with [pci] report_in_placement)",
                )
            if not (alias.vendor_id and alias.product_id) and not alias.resource_class:
                raise InvalidAlias(entry, "resource_class", "or vendor_id and product_id needed")
        else:
            for key in ("vendor_id", "product_id"):
                if getattr(alias, key) is None:
                    raise InvalidAlias(entry, key, "needed (without [pci] report_in_placement)")
        if first is not None:
            _check_repeat(first, alias)
        aliases[alias.name] = (*aliases.get(alias.name, ()), alias)
    return types.MappingProxyType(aliases)


def _check_repeat(first, alias):
    if alias.numa_policy != first.numa_policy:
        raise InvalidAlias(
            alias.entry,
            "numa_policy",
            f"{alias.numa_policy} differs from {first.numa_policy} of {alias.name!r}"
            f" in entry {first.entry}",
        )
    # nova compares the device types of a repeated name and fails when either
    # entry has none.
    if alias.device_type is None or first.device_type is None:
        raise InvalidAlias(
            alias.entry, "device_type", f"needed on every entry of the repeated {alias.name!r}"
        )
    if alias.device_type != first.device_type:
        raise InvalidAlias(
            alias.entry,
            "device_type",
            f"{alias.device_type} differs from {first.device_type} of {alias.name!r}"
            f" in entry {first.entry}",
        )


def _alias(entry, text):
    def fail(field, reason):
        raise InvalidAlias(entry, field, reason)

    try:
        fields = jsonvalue.load(text)
    except ValueError as exc:
        raise InvalidAlias(entry, None, str(exc)) from None
    if not isinstance(fields, dict):
        fail(None, "not a JSON object (repeat the option for more aliases)")
    for key, value in fields.items():
        if key not in KEYS:
            fail(key, f"unknown key (one of {', '.join(KEYS)})")
        if not isinstance(value, str):
            fail(key, f"{excerpt(value)} is not a string")
    if "name" not in fields:
        fail("name", "missing")
    name = fields["name"].strip()
    if not name or len(fields["name"]) > _NAME_MAX or set(name) & set(",:"):
        fail("name", f"{excerpt(fields['name'])} must be 1-{_NAME_MAX} characters, no ',' or ':'")
    ids = {}
    for key in ("vendor_id", "product_id"):
        if key in fields and not _ID.match(fields[key]):
            fail(key, f"{excerpt(fields[key])} is not 4 hex digits")
        ids[key] = fields[key].lower() if key in fields else None
    device_type = fields.get("device_type")
    if device_type is not None and device_type not in model.ALIAS_DEVICE_TYPES:
        fail(
            "device_type",
            f"{excerpt(device_type)} is not one of {', '.join(model.ALIAS_DEVICE_TYPES)}",
        )
    numa_policy = fields.get("numa_policy", LEGACY)
    if numa_policy not in NUMA_POLICIES:
        fail("numa_policy", f"{excerpt(numa_policy)} is not one of {', '.join(NUMA_POLICIES)}")
    resource_class = _convert(fields, "resource_class", spec.normalize_resource_class, fail)
    traits = _convert(fields, "traits", spec.parse_traits, fail) or ()
    live_migratable = _convert(fields, "live_migratable", spec.parse_bool, fail)
    return Alias(
        name,
        entry,
        ids["vendor_id"],
        ids["product_id"],
        device_type,
        numa_policy,
        resource_class,
        traits,
        live_migratable,
    )


def _convert(fields, key, convert, fail):
    if key not in fields:
        return None
    try:
        return convert(fields[key])
    except ValueError as exc:
        fail(key, str(exc))
