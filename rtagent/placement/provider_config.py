"""Provider config files: Nova's YAML schema 1.0, merged into the desired tree.

Every ``*.yaml`` file in ``[compute] provider_config_location`` (read in
name order) looks like::

    meta:
      schema_version: '1.0'
    providers:
      - identification:
          uuid: $COMPUTE_NODE        # or a provider uuid, or: name: <name>
        inventories:
          additional:
            - CUSTOM_FPGA: {total: 4, reserved: 0, allocation_ratio: 1.0}
        traits:
          additional: [CUSTOM_RACK_12]

As in nova: a provider named twice (across all files) is an error that
names both files; only CUSTOM_* classes and traits may be added; a class or
trait the driver owns may not be set; an explicit uuid or name wins over
``$COMPUTE_NODE`` for the same provider; a provider not in the tree is
logged once. Beyond nova: :class:`ProviderConfigSource` re-reads the files
on demand (SIGHUP) and keeps the last good configuration when they are bad;
what a reload drops is removed from Placement (until a restart, which forgets
what earlier files had added).

The files are hostile input until checked: at most :data:`MAX_FILES` files
of at most :data:`MAX_FILE_BYTES` each and :data:`MAX_TOTAL_BYTES` in all
(regular files only), and, before any object is built from the YAML,
nesting, aliases and what the aliases expand to are bounded
(:mod:`.bounded_yaml`), so a "billion laughs" costs a millisecond.
Anchors and aliases stay allowed because nova's loader (``yaml.safe_load``)
accepts them and operators use them to share a block between providers.
Numbers must be within Placement's own bounds (its inventory schema); NaN,
infinities and booleans are refused. Messages quote at most a short
excerpt of the input (``bounded_yaml.excerpt``) and are clipped.
"""

import dataclasses
import glob
import logging
import os
import re

from rtagent import exception
from rtagent.placement import bounded_yaml
from rtagent.placement.bounded_yaml import (  # noqa: F401 - limits re-exported
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_TOTAL_BYTES,
    clip,
    excerpt,
)
from rtagent.resources import Inventory, frozen_map

LOG = logging.getLogger(__name__)

COMPUTE_NODE = "$COMPUTE_NODE"
_VERSION = re.compile(r"^1\.(0|[1-9][0-9]*)$")
_CUSTOM = re.compile(r"^CUSTOM_[A-Z0-9_]{1,248}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")

# Placement's inventory schema (placement/schemas/inventory.py): integers
# up to db_const.MAX_INT, the ratio up to db_const.SQL_SP_FLOAT_MAX.
MAX_INT = 0x7FFFFFFF
MAX_RATIO = 3.40282e38
_INT_MINIMUM = {"total": 1, "reserved": 0, "min_unit": 1, "max_unit": 1, "step_size": 1}


class ProviderConfigError(exception.RtagentError):
    """A provider config file is invalid; the message names the file.

    The message is one line of at most about 1,000 characters whatever
    the input (the reason is clipped, control characters escaped)."""

    code = "placement.provider_config_invalid"
    msg_fmt = "Provider config {path}: {reason}"

    def __init__(self, message=None, **kwargs):
        for key in ("path", "reason"):
            if key in kwargs:
                kwargs[key] = clip(str(kwargs[key]))
        super().__init__(None if message is None else clip(str(message)), **kwargs)


@dataclasses.dataclass(frozen=True)
class ProviderConfig:
    """One provider's entry. ``uuid`` may be ``$COMPUTE_NODE``; exactly one
    of ``uuid`` and ``name`` is set. ``inventories`` maps class -> Inventory."""

    source: str
    uuid: str | None = None
    name: str | None = None
    inventories: object = dataclasses.field(default_factory=lambda: frozen_map({}))
    traits: frozenset = frozenset()

    @property
    def key(self):
        return ("uuid", self.uuid) if self.uuid else ("name", self.name)


# The keys schema 1.0 has, by where they are. nova's loader passes over
# others (a later 1.x may add some): the agent warns of each, and
# ``rtagent check-config`` refuses them, as it does unknown options.
_KNOWN_KEYS = {
    "": frozenset({"meta", "providers"}),
    "meta": frozenset({"schema_version"}),
    "provider": frozenset({"identification", "inventories", "traits"}),
    "inventories": frozenset({"additional"}),
    "traits": frozenset({"additional"}),
}


def parse(text, path, unknown=None):
    """The provider configs in one file's ``text``.

    :param unknown: a list that gets one line per key schema 1.0 does not
        have (``path: providers[0] (name x): unknown key 'aggregates'``);
        None: each is logged as a warning instead.
    :raises ProviderConfigError: invalid YAML or schema, or beyond the
        limits on nesting and aliases.
    """

    def fail(reason):
        raise ProviderConfigError(path=path, reason=reason)

    def note(where, block, kind):
        for key in sorted(set(block) - _KNOWN_KEYS[kind], key=str):
            line = f"Provider config {path}: {where}unknown key {excerpt(key)}"
            if unknown is None:
                LOG.warning("%s; ignored (rtagent check-config lists them all)", line)
            else:
                unknown.append(line)

    doc = bounded_yaml.load(text, fail)
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict):
        fail("a 'meta' mapping with 'schema_version' is required")
    note("", doc, "")
    note("meta: ", doc["meta"], "meta")
    version = doc["meta"].get("schema_version", "")
    if isinstance(version, (int, float)) and not isinstance(version, bool):
        version = str(version)  # schema_version: 1.0 (unquoted) as before
    if not isinstance(version, str) or not _VERSION.match(version):
        fail(f"unsupported schema_version {excerpt(version)} (this agent reads 1.x)")
    providers = doc.get("providers", [])
    if not isinstance(providers, list):
        fail("'providers' must be a list")
    return tuple(_parse_provider(entry, i, fail, path, note) for i, entry in enumerate(providers))


def _parse_provider(entry, index, fail, path, note):
    where = f"providers[{index}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("identification"), dict):
        fail(f"{where}: an 'identification' mapping is required")
    ident = entry["identification"]
    if set(ident) not in ({"uuid"}, {"name"}):
        fail(f"{where}.identification: exactly one of 'uuid' or 'name' is required")
    uuid, name = ident.get("uuid"), ident.get("name")
    if uuid is not None and (
        not isinstance(uuid, str) or (uuid != COMPUTE_NODE and not _UUID.match(uuid))
    ):
        fail(f"{where}.identification.uuid: {excerpt(uuid)} is neither a UUID nor {COMPUTE_NODE}")
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 200):
        fail(f"{where}.identification.name: 1 to 200 characters")
    where += f" ({'uuid' if uuid else 'name'} {excerpt(uuid or name)})"
    note(f"{where}: ", entry, "provider")
    for section in ("inventories", "traits"):
        if isinstance(entry.get(section), dict):
            note(f"{where}.{section}: ", entry[section], section)
    invs = {}
    for item in _additional(entry, "inventories", where, fail):
        if not isinstance(item, dict):
            fail(f"{where}.inventories.additional: items are {{CLASS: {{total: ...}}}}")
        for rc, fields in item.items():
            invs[_custom_name(rc, f"{where}.inventories", fail)] = _inventory(
                fields, f"{where}.inventories.{rc}", fail
            )
    traits = frozenset(
        _custom_name(t, f"{where}.traits", fail) for t in _additional(entry, "traits", where, fail)
    )
    return ProviderConfig(
        source=path,
        uuid=uuid.lower() if uuid and uuid != COMPUTE_NODE else uuid,
        name=name,
        inventories=frozen_map(invs),
        traits=traits,
    )


def _additional(entry, section, where, fail):
    block = entry.get(section) or {}
    if not isinstance(block, dict):
        fail(f"{where}.{section}: must be a mapping with 'additional'")
    items = block.get("additional") or []
    if not isinstance(items, list):
        fail(f"{where}.{section}.additional: must be a list")
    return items


def _custom_name(name, where, fail):
    if not isinstance(name, str) or not _CUSTOM.match(name):
        fail(f"{where}: {excerpt(name)} is not a CUSTOM_ name (only custom ones may be added)")
    return name


def _inventory(fields, where, fail):
    """An Inventory from one class's fields, within Placement's bounds."""
    if not isinstance(fields, dict) or "total" not in fields:
        fail(f"{where}: a mapping with at least 'total' is required")
    unknown = set(fields) - set(_INT_MINIMUM) - {"allocation_ratio"}
    if unknown:
        fail(f"{where}: unknown field(s) {excerpt(sorted(unknown, key=excerpt))}")
    for key, minimum in _INT_MINIMUM.items():
        value = fields.get(key, minimum)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INT:
            fail(
                f"{where}.{key}: must be an integer from {minimum} to {MAX_INT}, "
                f"got {excerpt(value)}"
            )
    ratio = fields.get("allocation_ratio", 1.0)
    # NaN fails every comparison; infinities and -0.0 fail these.
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= MAX_RATIO:
        fail(
            f"{where}.allocation_ratio: must be a number above 0 and at most {MAX_RATIO:g}, "
            f"got {excerpt(ratio)}"
        )
    total = fields["total"]
    inv = Inventory(
        total=total,
        reserved=fields.get("reserved", 0),
        min_unit=fields.get("min_unit", 1),
        max_unit=fields.get("max_unit", total),
        step_size=fields.get("step_size", 1),
        allocation_ratio=float(ratio),
    )
    if inv.reserved > inv.total:
        fail(f"{where}: needs reserved <= total (reserved {inv.reserved}, total {inv.total})")
    if not inv.min_unit <= inv.max_unit <= inv.total:
        fail(
            f"{where}: needs min_unit <= max_unit <= total (min_unit {inv.min_unit}, "
            f"max_unit {inv.max_unit}, total {inv.total})"
        )
    return inv


def load(location, unknown=None):
    """Every provider config under ``location`` (a directory), validated.

    A missing directory means no configs (nova's behaviour).

    :param unknown: a list for the keys schema 1.0 does not have (see
        :func:`parse`); None: each is logged as a warning.

    :raises ProviderConfigError: more than MAX_FILES files or
        MAX_TOTAL_BYTES in all; a file is unreadable, not a regular file,
        bigger than MAX_FILE_BYTES, not UTF-8 or invalid; or two entries
        name the same provider (both files are named).
    """
    if not location or not os.path.isdir(location):
        return ()
    paths = sorted(glob.glob(os.path.join(glob.escape(location), "*.yaml")))
    if len(paths) > MAX_FILES:
        raise ProviderConfigError(
            path=location,
            reason=f"{len(paths)} *.yaml files, at most {MAX_FILES} are read",
        )
    configs, seen, size = [], {}, 0
    for path in paths:
        text, length = bounded_yaml.read(path, _failing(path))
        size += length
        if size > MAX_TOTAL_BYTES:
            raise ProviderConfigError(
                path=path,
                reason=f"the files up to this one hold more than {MAX_TOTAL_BYTES} bytes",
            )
        for config in parse(text, path, unknown):
            if config.key in seen:
                raise ProviderConfigError(
                    path=path,
                    reason=f"provider {config.key[0]} {config.key[1]!r} is also "
                    f"configured in {seen[config.key]}",
                )
            seen[config.key] = path
            configs.append(config)
    return tuple(configs)


def merge(tree, configs):
    """``tree`` with ``configs``' inventories and traits added.

    ``$COMPUTE_NODE`` applies to every root of ``tree``; an explicit uuid or
    name wins over it for the same provider. What the configs add becomes
    managed by the agent (removed when it leaves the files).

    :returns: (merged tree, problems, absent): ``problems`` is a list of
        :class:`ProviderConfigError` for entries that try to set a class or
        trait the driver owns (those entries are skipped, the rest applies);
        ``absent`` lists the configs that match no provider of ``tree``.
    """
    explicit = {c.key: c for c in configs if c.uuid != COMPUTE_NODE}
    wildcard = next((c for c in configs if c.uuid == COMPUTE_NODE), None)
    used, problems, providers = set(), [], []
    for provider in tree:
        config = explicit.get(("uuid", provider.uuid)) or explicit.get(("name", provider.name))
        if config is None and provider.parent_uuid is None:
            config = wildcard
        if config is None:
            providers.append(provider)
            continue
        used.add(config.key)
        owned_traits = config.traits & (provider.managed_traits | provider.traits)
        owned_classes = set(config.inventories) & (
            provider.managed_classes | set(provider.inventories)
        )
        if owned_traits or owned_classes:
            problems.append(
                ProviderConfigError(
                    path=config.source,
                    reason=f"provider {provider.uuid} ({provider.name}): the driver owns "
                    f"{sorted(owned_classes | owned_traits)}; this entry is ignored",
                )
            )
            providers.append(provider)
            continue
        providers.append(
            provider.replace(
                traits=provider.traits | config.traits,
                managed_traits=provider.managed_traits | config.traits,
                inventories=frozen_map({**provider.inventories, **config.inventories}),
                managed_classes=provider.managed_classes | frozenset(config.inventories),
            )
        )
    absent = [c for c in configs if c.uuid != COMPUTE_NODE and c.key not in used]
    return type(tree)(providers), problems, absent


class ProviderConfigSource:
    """The provider configs in force, re-read on demand.

    :param location: the directory (``[compute] provider_config_location``).
    :param configs: the configs to start with, e.g. ``load(location)`` at
        start-up (where a bad file should stop the agent with its error).
    """

    def __init__(self, location, configs=()):
        self.location = location
        self._configs = tuple(configs)
        self._logged = set()
        # provider uuid -> (traits, classes) the configs ever added in this
        # process: still managed after they leave the files, so a reload
        # that drops them removes them from Placement.
        self._added = {}
        self.last_error = None

    @property
    def configs(self):
        return self._configs

    def reload(self, location=None):
        """Re-read the files (on SIGHUP), from ``location`` if given (the
        reloaded ``provider_config_location``). A bad file keeps the last
        good configuration and location in force: the error is logged and
        kept in ``last_error``. :returns: True if the new files were adopted."""
        location = self.location if location is None else location
        try:
            configs = load(location)
        except ProviderConfigError as exc:
            self.last_error = exc
            LOG.error("%s; keeping the last good provider configuration", exc)
            return False
        self._configs, self.last_error = configs, None
        self.location = location
        self._logged.clear()
        LOG.info("Provider configuration reloaded: %d provider(s)", len(configs))
        return True

    def apply(self, tree):
        """``tree`` merged with the configs (one node); see :meth:`apply_all`."""
        return self.apply_all({None: tree})[None]

    def apply_all(self, trees):
        """{node: tree} merged with the configs. Problems, and configs that
        match no provider of any of the trees, are logged once each (until
        the next reload)."""
        merged, missing = {}, None
        for node, tree in trees.items():
            merged[node], problems, absent = merge(tree, self._configs)
            merged[node] = self._keep_managed(tree, merged[node])
            for problem in problems:
                self._log_once(("problem", problem.message), LOG.error, problem.message)
            keys = {c.key for c in absent}
            missing = keys if missing is None else missing & keys
        for config in self._configs:
            if missing and config.key in missing:
                self._log_once(
                    ("absent", config.key),
                    LOG.warning,
                    f"Provider config {config.source}: no provider with {config.key[0]} "
                    f"{config.key[1]!r} on this host; ignored",
                )
        return merged

    def _keep_managed(self, tree, merged):
        providers = []
        for provider in merged:
            before = tree.get(provider.uuid)
            traits, classes = self._added.get(provider.uuid, (frozenset(), frozenset()))
            traits |= provider.traits - before.traits
            classes |= set(provider.inventories) - set(before.inventories)
            self._added[provider.uuid] = (traits, frozenset(classes))
            providers.append(
                provider.replace(
                    managed_traits=provider.managed_traits | traits,
                    managed_classes=provider.managed_classes | classes,
                )
            )
        return type(merged)(providers)

    def _log_once(self, key, log, message):
        if key not in self._logged:
            self._logged.add(key)
            log("%s", message)


def _failing(path):
    def fail(reason):
        raise ProviderConfigError(path=path, reason=reason)

    return fail
