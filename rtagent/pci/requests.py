# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""A claim's PCI requests as a caller states them, checked and turned into
:class:`~rtagent.pci.pools.PciRequest` values. Pure, and done before the
tracker's lock is taken: a bad request changes nothing.

Each request is a mapping, one of:

- ``{"alias": name, "count": n}``: a ``[pci] alias`` of the node (the
  ``aliases`` passed in), as a flavor's ``pci_passthrough:alias`` names it;
  the entries of a repeated name are alternatives (a device matching any
  of them will do), as in nova;
- ``{"spec": [{...}, ...], "count": n}``: device specs as nova's
  ``InstancePCIRequest.spec`` holds them (``vendor_id``, ``product_id``,
  ``dev_type``, tags such as ``physical_network``); a device matching any
  one of them will do.

Either may add ``numa_policy`` (for an alias it replaces the alias's, as
nova's ``hw:pci_numa_affinity_policy`` does) and ``request_id``. Without a
``request_id``, one is derived from the instance UUID and the request's
position, so that a retried claim, and a move of the same instance, give
the same ids.
"""

import re
import uuid

from rtagent.pci import model, pools
from rtagent.pci.errors import InvalidRequest

MAX_REQUESTS = 16
MAX_COUNT = 64
MAX_SPECS = 8
MAX_SPEC_KEYS = 16
MAX_VALUE_CHARS = 255
KEYS = ("alias", "spec", "count", "numa_policy", "request_id")
# Placement's to match: a request by spec cannot state them (an alias can,
# with [pci] report_in_placement), except ``rp_uuids`` with it.
PLACEMENT_KEYS = ("resource_class", "traits", "rp_uuid", "rp_uuids")
# A spec's ``rp_uuids`` (with [pci] report_in_placement): the device
# providers Placement allocated the request from, as nova's scheduler
# writes them into the spec (a comma-separated string, or a list).
RP_UUIDS = "rp_uuids"
MAX_RP_UUIDS = MAX_COUNT
# Derived request ids: uuid5 of "<instance uuid>/<position>" in this namespace.
NAMESPACE = uuid.UUID("9f7bbf2a-4b1e-4f43-9c3e-6d1f0c2a7e51")
REQUEST_ID_PATTERN = r"\A[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}\Z"
_REQUEST_ID = re.compile(REQUEST_ID_PATTERN)
SPEC_KEY_PATTERN = r"\A[a-z][a-z0-9_]{0,63}\Z"
_SPEC_KEY = re.compile(SPEC_KEY_PATTERN)
_HEX_ID = re.compile(r"\A[0-9a-fA-F]{4}\Z")
# Spec keys every device has: a null value for them asks for nothing.
_DEVICE_FIELDS = ("vendor_id", "product_id", "dev_type")


def derived_id(instance_uuid, position):
    """The request id of the ``position``-th request of an instance that
    gave none."""
    return str(uuid.uuid5(NAMESPACE, f"{instance_uuid}/{position}"))


def parse(raw, aliases, instance_uuid, in_placement=False):
    """The :class:`~rtagent.pci.pools.PciRequest` values of ``raw``.

    :param raw: a list of request mappings (see the module doc), or None.
    :param aliases: alias name -> its :class:`~rtagent.pci.alias.Alias`
        entries (the node's ``[pci] alias``).
    :param instance_uuid: the instance the requests are for (derived ids).
    :param in_placement: ``[pci] report_in_placement``: an alias's
        ``resource_class`` and ``traits`` are then matched too.
    :returns: a tuple of PciRequest, in the order given; empty for None.
    :raises InvalidRequest: a request or a field of one is invalid (its
        ``field`` names it: ``pci_requests.0.alias``), or two requests share
        an id.
    """
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise InvalidRequest("must be a list of requests", "pci_requests")
    if len(raw) > MAX_REQUESTS:
        raise InvalidRequest(f"{len(raw)} requests, at most {MAX_REQUESTS}", "pci_requests")
    found, seen = [], {}
    for position, item in enumerate(raw):
        request = _request(item, f"pci_requests.{position}", aliases, in_placement)
        request_id = request.pop("request_id", None) or derived_id(instance_uuid, position)
        if request_id in seen:
            raise InvalidRequest(
                f"{request_id!r} is also the id of request {seen[request_id]}",
                f"pci_requests.{position}.request_id",
            )
        seen[request_id] = position
        found.append(pools.PciRequest(request_id=request_id, **request))
    return tuple(found)


def _request(item, where, aliases, in_placement):
    """The PciRequest fields of one request mapping (``request_id`` None
    when not given)."""
    if not isinstance(item, dict):
        raise InvalidRequest("must be an object with alias or spec, and count", where)
    for key in item:
        if key not in KEYS:
            raise InvalidRequest(f"unknown key (one of {', '.join(KEYS)})", f"{where}.{key}")
    if ("alias" in item) == ("spec" in item):
        raise InvalidRequest("give either alias or spec", where)
    count = item.get("count")
    if "count" not in item:
        raise InvalidRequest("missing", f"{where}.count")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise InvalidRequest(f"{count!r} is not an integer from 1 to {MAX_COUNT}", f"{where}.count")
    policy = item.get("numa_policy")
    if policy is not None and policy not in pools.NUMA_POLICIES:
        raise InvalidRequest(
            f"{policy!r} is not one of {', '.join(pools.NUMA_POLICIES)}", f"{where}.numa_policy"
        )
    request_id = item.get("request_id")
    if request_id is not None and not (
        isinstance(request_id, str) and _REQUEST_ID.match(request_id)
    ):
        raise InvalidRequest(
            f"{request_id!r} is not 1-64 letters, digits and _.:- (a letter or digit first)",
            f"{where}.request_id",
        )
    fields = {"count": count, "request_id": request_id}
    if "alias" in item:
        entries = _alias(item["alias"], aliases, f"{where}.alias")
        fields.update(
            specs=tuple(a.request_spec() for a in entries),
            numa_policy=policy or entries[0].numa_policy,
            alias_name=entries[0].name,
            placement_entries=entries if in_placement else (),
        )
    else:
        fields.update(specs=_specs(item["spec"], f"{where}.spec", in_placement), numa_policy=policy)
    return fields


def _alias(name, aliases, where):
    if not isinstance(name, str):
        raise InvalidRequest(f"{name!r} is not an alias name", where)
    entries = aliases.get(name)
    if not entries:
        known = ", ".join(sorted(aliases)) or "none"
        raise InvalidRequest(f"unknown alias {name!r} (the node's [pci] alias: {known})", where)
    return tuple(entries)


def _specs(specs, where, in_placement=False):
    if not isinstance(specs, list | tuple) or not 1 <= len(specs) <= MAX_SPECS:
        raise InvalidRequest(f"must be a list of 1 to {MAX_SPECS} spec objects", where)
    return tuple(_spec(spec, f"{where}.{i}", in_placement) for i, spec in enumerate(specs))


def _rp_uuids(value, at):
    """The provider UUIDs of a spec's ``rp_uuids``, as a sorted tuple that
    keeps repeats: nova's scheduler names a provider once per device it
    allocated from it (:attr:`~rtagent.pci.pools.PciRequest.provider_counts`)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not 1 <= len(items) <= MAX_RP_UUIDS:
        raise InvalidRequest(f"must name 1 to {MAX_RP_UUIDS} provider UUIDs", at)
    found = []
    for item in items:
        try:
            found.append(str(uuid.UUID(str(item).strip())))
        except ValueError:
            raise InvalidRequest(f"{item!r} is not a UUID", at) from None
    return tuple(sorted(found))


def _spec(spec, where, in_placement=False):
    if not isinstance(spec, dict) or not 1 <= len(spec) <= MAX_SPEC_KEYS:
        raise InvalidRequest(f"must be an object of 1 to {MAX_SPEC_KEYS} keys", where)
    checked = {}
    for key, value in spec.items():
        at = f"{where}.{key}"
        if not isinstance(key, str) or not _SPEC_KEY.match(key):
            raise InvalidRequest("a key is 1-64 lower-case letters, digits and _", where)
        if key == RP_UUIDS and in_placement:
            checked[key] = _rp_uuids(value, at)
            continue
        if key in PLACEMENT_KEYS:
            raise InvalidRequest("matched by Placement: ask for it through an alias", at)
        if value is None and key not in _DEVICE_FIELDS:
            # The device must not carry the tag, as nova matches a spec's
            # None (a tunnel port: no physical_network).
            checked[key] = None
            continue
        if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
            raise InvalidRequest(f"longer than {MAX_VALUE_CHARS} characters", at)
        if not isinstance(value, str | bool | int):
            raise InvalidRequest(f"{value!r} is not a string, integer or boolean", at)
        if key in ("vendor_id", "product_id"):
            if not isinstance(value, str) or not _HEX_ID.match(value):
                raise InvalidRequest(f"{value!r} is not 4 hex digits", at)
            checked[key] = value.lower()
            continue
        if key == "dev_type" and value not in model.DEVICE_TYPES:
            raise InvalidRequest(f"{value!r} is not one of {', '.join(model.DEVICE_TYPES)}", at)
        checked[key] = value
    return checked
