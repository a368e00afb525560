# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""``[pci] device_spec``: the host PCI devices guests may use and the tags
they carry, with nova's meaning (``nova.pci.devspec``, ``nova.pci.whitelist``).

Each option value is a JSON object or a list of them. ``vendor_id``,
``product_id``, ``address`` (a glob ``[[[[dom]:]bus]:][slot][.[func]]`` or an
object of regexes) and ``devname`` select devices (a missing one is a
wildcard); every other key is a tag. The first spec that matches a device
wins. A spec naming one exact PF (by address, or by ``devname``) also
matches that PF's VFs. Cross-field rules, as nova: ``address`` excludes
``devname``; ``one_time_use`` true needs ``report_in_placement``; and, at
:func:`check_host`, a ``remote_managed`` spec must not match a PF, its
``devname`` must exist, and a VF's spec must not set ``one_time_use``.

Stricter than nova, on purpose (nova accepts these and then silently never
matches, ignores them, or fails later): a hex id or address part with a sign
or underscore; unknown keys in an address object; a list or object as a tag
value; a tag named like a field of nova's pools (``dev_type``...); a boolean
tag outside oslo's boolean words; an empty string; a resource class or trait
that Placement would refuse; and ``resource_class``/``traits`` together with
``physical_network`` (nova leaves such devices out of Placement).

Not done: nova ignores a remote-managed device without a card serial number
in its PCI VPD; :class:`~rtagent.pci.model.HostDevice` does not carry one.
"""

import dataclasses
import re
import types

import os_resource_classes
import os_traits
import re2
from oslo_utils import strutils

from rtagent.excerpt import clip, excerpt
from rtagent.pci import jsonvalue, model
from rtagent.pci.errors import InvalidDeviceSpec

# An address part's regex: nova's are a few characters.
MAX_PATTERN = 256
MAX_REPEAT = 1000  # RE2's own bound on {n,m}
_REPEAT = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")
_OPEN_REPEAT = re.compile(r"\{,[0-9]*\}")
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would also print each refusal to stderr

# (name, maximum, digits once normalised) of each part of a PCI address.
_PARTS = (("domain", 0xFFFF, 4), ("bus", 0xFF, 2), ("slot", 0x1F, 2), ("function", 0x7, 1))
MAX_ID = 0xFFFF
BOOLEAN_TAGS = ("trusted", "remote_managed", "managed", "live_migratable", "one_time_use")
# Keys nova's PCI pools take from the device or use themselves: a tag of that
# name would overwrite them there.
RESERVED_TAGS = frozenset(
    ("dev_type", "numa_node", "parent_ifname", "count", "devices", "rp_uuid", "rp_uuids")
)
# int(x, 16) as nova calls it, minus the signs and underscores it also takes.
_HEX = re.compile(r"^(0[xX])?[0-9a-fA-F]+$")
_ADDRESS = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")
_PLACEMENT_NAME = re.compile(r"^[A-Z0-9_]+$")
_STANDARD_TRAITS = frozenset(os_traits.get_traits())


@dataclasses.dataclass(frozen=True)
class GlobAddress:
    """Address parts as normalised hex (``0000``, ``0a``, ``1f``, ``7``);
    None is a wildcard."""

    domain: str | None = None
    bus: str | None = None
    slot: str | None = None
    function: str | None = None

    def matches(self, address):
        found = _ADDRESS.match(address.lower())
        return bool(found) and all(
            want in (None, got)
            for want, got in zip(dataclasses.astuple(self), found.groups(), strict=True)
        )

    @property
    def exact(self):
        # nova's is_single_address: only then may the address be a PF's.
        return None not in dataclasses.astuple(self)


@dataclasses.dataclass(frozen=True)
class RegexAddress:
    """Compiled patterns, each matched at the start of its part (as nova's
    ``re.match``). RE2 patterns: matched in time linear in the part, so a
    pattern that backtracks catastrophically under Python's ``re``
    (``(?:0?){400}1``) costs a match what any other does."""

    domain: object
    bus: object
    slot: object
    function: object

    @property
    def patterns(self):
        # Not dataclasses.astuple: it deep-copies every field.
        return (self.domain, self.bus, self.slot, self.function)

    def matches(self, address):
        found = _ADDRESS.match(address.lower())
        return bool(found) and all(
            p.match(got) for p, got in zip(self.patterns, found.groups(), strict=True)
        )

    @property
    def exact(self):
        # nova looks the literal parts up in sysfs, so only plain hex parts of
        # the full width can name a PF.
        parts = (p.pattern for p in self.patterns)
        return all(
            re.fullmatch(f"[0-9a-fA-F]{{{w}}}", s)
            for s, (_, _, w) in zip(parts, _PARTS, strict=True)
        )


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One device spec. ``entry`` is the position of its option value;
    ``tags`` a read-only mapping of the tags set (booleans as bool, traits a
    sorted tuple, resource_class normalised)."""

    entry: int
    vendor_id: str | None = None
    product_id: str | None = None
    address: GlobAddress | RegexAddress = GlobAddress()
    devname: str | None = None
    tags: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )

    def matches(self, device, parent=None):
        """Whether ``device`` (a :class:`~rtagent.pci.model.HostDevice`) is
        selected. ``parent``: a VF's PF device, needed to match a VF by its
        PF's ``devname``."""
        if self.vendor_id not in (None, device.vendor_id.lower()):
            return False
        if self.product_id not in (None, device.product_id.lower()):
            return False
        if self.devname is not None:
            return device.devname == self.devname or (
                parent is not None
                and device.parent_addr == parent.address
                and parent.devname == self.devname
            )
        if self.address.matches(device.address):
            return True
        # nova: a spec naming one PF exactly also takes that PF's VFs (it
        # checks sysfs that the address is a PF; a VF's parent always is).
        return (
            bool(device.parent_addr)
            and self.address.exact
            and self.address.matches(device.parent_addr)
        )


def match(specs, device, parent=None):
    """The first of ``specs`` that matches ``device``, or None."""
    return next((s for s in specs if s.matches(device, parent)), None)


def parse_device_specs(values, report_in_placement=False):
    """The specs of the ``[pci] device_spec`` values (JSON strings), in order.

    :raises InvalidDeviceSpec: an entry or a field of one is invalid.
    """
    specs = []
    for entry, text in enumerate(values):
        try:
            loaded = jsonvalue.load(text)
        except ValueError as exc:
            raise InvalidDeviceSpec(entry, None, str(exc)) from None
        for item in loaded if isinstance(loaded, list) else [loaded]:
            if not isinstance(item, dict):
                raise InvalidDeviceSpec(entry, None, "not a JSON object or a list of them")
            specs.append(_spec(entry, item, report_in_placement))
    return tuple(specs)


def check_host(specs, devices, report_in_placement=False):
    """The rules nova checks against the host's devices (``devices``: every
    :class:`~rtagent.pci.model.HostDevice` discovered).

    :raises InvalidDeviceSpec: a remote_managed spec names a devname absent
        from ``devices`` or matches a PF; while reporting in Placement, the
        spec a VF gets sets one_time_use (even to false, as nova).
    """
    by_address = {d.address: d for d in devices}
    for spec in (s for s in specs if s.tags.get("remote_managed")):
        if spec.devname and all(d.devname != spec.devname for d in devices):
            raise InvalidDeviceSpec(spec.entry, "devname", f"{spec.devname} is not on this host")
        pf = next((d for d in devices if d.dev_type == model.TYPE_PF and spec.matches(d)), None)
        if pf is not None:
            raise InvalidDeviceSpec(
                spec.entry, "remote_managed", f"matches PF {pf.address}; only VFs can be"
            )
    vfs = [d for d in devices if d.dev_type in model.CHILD_TYPES] if report_in_placement else []
    for vf in vfs:
        spec = match(specs, vf, by_address.get(vf.parent_addr))
        if spec is not None and "one_time_use" in spec.tags:
            raise InvalidDeviceSpec(
                spec.entry, "one_time_use", f"matches VF {vf.address}; VFs cannot be one-time-use"
            )


def resource_class_of(device, tags):
    """The resource class nova's PCI-in-placement gives a device: its spec's
    ``resource_class`` or ``CUSTOM_PCI_<VENDOR>_<PRODUCT>``."""
    return tags.get("resource_class") or (
        f"CUSTOM_PCI_{device.vendor_id}_{device.product_id}".upper()
    )


def traits_of(device, tags):
    """The traits nova's PCI-in-placement puts on a device's provider: its
    spec's, COMPUTE_MANAGED_PCI_DEVICE, HW_PCI_LIVE_MIGRATABLE when live
    migratable, HW_PCI_ONE_TIME_USE for a one-time-use PCI device or PF."""
    traits = set(tags.get("traits", ())) | {os_traits.COMPUTE_MANAGED_PCI_DEVICE}
    if tags.get("live_migratable"):
        traits.add(os_traits.HW_PCI_LIVE_MIGRATABLE)
    if tags.get("one_time_use") and device.dev_type not in model.CHILD_TYPES:
        traits.add(os_traits.HW_PCI_ONE_TIME_USE)
    return frozenset(traits)


def normalize_resource_class(name):
    """nova's normalisation: upper case; a standard class or ``CUSTOM_*``
    kept, anything else ``CUSTOM_`` + runs of non-alphanumerics as ``_``.

    :raises ValueError: the result is not a valid Placement class name.
    """
    upper = name.upper()
    if upper not in os_resource_classes.STANDARDS:
        upper = _custom(upper)
    return _placement_name(name, upper, "resource class")


def parse_traits(text):
    """A comma-separated list of traits, normalised as nova does (a standard
    trait is kept only if spelt exactly; the rest as for resource classes,
    spaces included: ``"a, b"`` is CUSTOM_A and CUSTOM__B), sorted.

    :raises ValueError: a trait is not a valid Placement trait name.
    """
    traits = set()
    for name in text.split(","):
        if name in _STANDARD_TRAITS:
            traits.add(name)
        else:
            traits.add(_placement_name(name, _custom(name.upper()), "trait"))
    return tuple(sorted(traits))


def parse_bool(value):
    """oslo's strict boolean words (true/false, yes/no, on/off, 1/0, t/f,
    y/n, any case) or a JSON boolean.

    :raises ValueError: anything else.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in strutils.TRUE_STRINGS + strutils.FALSE_STRINGS:
            return word in strutils.TRUE_STRINGS
    raise ValueError(f"{excerpt(value)} is not a boolean (true/false, yes/no, on/off, 1/0)")


def _custom(upper):
    return upper if upper.startswith("CUSTOM_") else "CUSTOM_" + re.sub("[^0-9A-Za-z]+", "_", upper)


def _placement_name(given, name, what):
    if len(name) > 255 or not _PLACEMENT_NAME.match(name) or name == "CUSTOM_":
        raise ValueError(f"{excerpt(given)} does not make a valid {what} ({excerpt(name)})")
    return name


# -- parsing one spec ------------------------------------------------------


def _spec(entry, item, report_in_placement):
    def fail(field, reason):
        raise InvalidDeviceSpec(entry, field, reason)

    fields = dict(item)
    vendor_id = _hex_id(fields.pop("vendor_id", "*"), MAX_ID, 4, fail, field="vendor_id")
    product_id = _hex_id(fields.pop("product_id", "*"), MAX_ID, 4, fail, field="product_id")
    devname = fields.pop("devname", None)
    if devname is not None and (not isinstance(devname, str) or not devname.strip()):
        fail("devname", "must be a non-empty string")
    if "address" in fields and devname is not None:
        fail("address", "address and devname exclude each other")
    address = fields.pop("address", "")
    if isinstance(address, dict):
        address = _regex_address(address, fail)
    elif isinstance(address, str):
        address = _glob_address(address, fail)
    else:
        fail("address", "must be a glob string or an object of regexes")
    tags = _tags(fields, fail)
    if tags.get("one_time_use") and not report_in_placement:
        fail("one_time_use", "needs [pci] report_in_placement")
    if "physical_network" in tags:
        for key in ("resource_class", "traits"):
            if key in tags:
                fail(key, "not with physical_network (such devices are not in Placement)")
    return DeviceSpec(entry, vendor_id, product_id, address, devname, types.MappingProxyType(tags))


def _hex_id(value, maximum, digits, fail, *, field, part=""):
    """A normalised hex number, None for ``*``; ``part`` names an address's."""
    what = f"{part} {excerpt(value)}" if part else excerpt(value)
    if not isinstance(value, str):
        fail(field, f"{what} is not a string")
    value = value.strip()
    if value == "*":
        return None
    if not _HEX.match(value):
        fail(field, f"{what} is not hex or *")
    if int(value, 16) > maximum:
        fail(field, f"{what} is above the maximum {maximum:X}")
    return f"{int(value, 16):0{digits}x}"


def _glob_address(text, fail):
    dbs, _, function = text.partition(".")
    parts = dbs.split(":") if dbs else []
    if len(parts) > 3:
        fail("address", f"{excerpt(text)} has more than domain:bus:slot before the dot")
    parts = ["*"] * (3 - len(parts)) + parts + [function]
    return GlobAddress(
        *(
            _hex_id(part.strip() or "*", maximum, digits, fail, field="address", part=name)
            for part, (name, maximum, digits) in zip(parts, _PARTS, strict=True)
        )
    )


def _regex_address(parts, fail):
    unknown = sorted(set(parts) - {name for name, _, _ in _PARTS})
    if unknown:
        fail("address", f"unknown key {excerpt(unknown[0])} (domain, bus, slot, function)")
    compiled = []
    for name, _, _ in _PARTS:
        pattern = parts.get(name, ".*")
        if not isinstance(pattern, str):
            fail("address", f"{name}: {excerpt(pattern)} is not a string")
        compiled.append(_compile(pattern, lambda why, n=name: fail("address", f"{n}: {why}")))
    return RegexAddress(*compiled)


def _compile(pattern, fail):
    """``pattern`` compiled by RE2. Refused: a pattern longer than
    :data:`MAX_PATTERN`, a repetition count above RE2's 1,000 (RE2 would
    read ``{4294967296}`` as literal text, Python's ``re`` overflows), and
    what RE2 does not have (backreferences, lookaround)."""
    if len(pattern) > MAX_PATTERN:
        fail(f"invalid regex {excerpt(pattern)} (longer than {MAX_PATTERN} characters)")
    if _OPEN_REPEAT.search(pattern):
        # Python's re (nova's) reads {,n} as {0,n}; RE2 as text.
        fail(f"invalid regex {excerpt(pattern)} (write {{0,n}} for {{,n}})")
    for count in (c for pair in _REPEAT.findall(pattern) for c in pair if c):
        if len(count) > 4 or int(count) > MAX_REPEAT:
            fail(f"invalid regex {excerpt(pattern)} (a repetition count above {MAX_REPEAT})")
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
        fail(f"invalid regex {excerpt(pattern)} ({clip(why, 120)})")


def _tags(fields, fail):
    tags = {}
    for key, value in fields.items():
        if value is None:
            continue  # nova's "physical_network": null: not set
        if key in RESERVED_TAGS:
            fail(key, "is a field of nova's PCI pools, not a tag")
        if isinstance(value, str) and not value.strip():
            fail(key, "is empty")
        try:
            if key in BOOLEAN_TAGS:
                tags[key] = parse_bool(value)
            elif key == "resource_class":
                tags[key] = normalize_resource_class(_string(value))
            elif key == "traits":
                tags[key] = parse_traits(_string(value))
            elif key == "physical_network":
                tags[key] = _string(value)
            elif isinstance(value, (str, int, float, bool)):
                tags[key] = value
            else:
                fail(key, "a tag value must be a string, number or boolean")
        except ValueError as exc:
            fail(key, str(exc))
    return tags


def _string(value):
    if not isinstance(value, str):
        raise ValueError(f"{excerpt(value)} is not a string")
    return value
