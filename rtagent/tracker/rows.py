# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""What a stored row must be to be believed, and what a node's rows must
add up to. Pure: the store reads, this module judges.

A row the agent wrote passed the RPC contract's bounds when it was asked
for (:mod:`rtagent.jsonbounds`), so reading it back checks the same
bounds: a row edited to hold negative, NaN or 10^30 usage, a pinning of
``"x"``, or two instances holding one pinned CPU or one device is nonsense
that no call could have produced. The agent refuses to start on it rather
than report it, heal Placement to it, or hand the same CPU to a third guest.

Each refusal names the table, the row and the first field at fault, in
one line (the value clipped).
"""

import jsonschema

from rtagent import cpuspec, excerpt, jsonbounds
from rtagent.numa import model as numa_model
from rtagent.pci import address as pci_address
from rtagent.pci import holding
from rtagent.pci import model as pci_model
from rtagent.pci import requests as pci_requests

# Placement keeps amounts in 32-bit signed integers.
_AMOUNT = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
_RESOURCES = {
    "type": "object",
    "propertyNames": {"pattern": jsonbounds.RESOURCE_CLASS_PATTERN},
    "additionalProperties": _AMOUNT,
    "maxProperties": 64,
}
_ASSIGNED = {
    "type": "object",
    "propertyNames": {"pattern": jsonbounds.RESOURCE_CLASS_PATTERN},
    "additionalProperties": {
        "type": "array",
        "maxItems": 1024,
        "uniqueItems": True,
        "items": jsonbounds.TEXT,
    },
    "maxProperties": 16,
}
_HOST_CPU = {"type": "integer", "minimum": 0, "maximum": cpuspec.MAX_CPU_ID}
_HOST_CPUS = {"type": "array", "maxItems": 4096, "uniqueItems": True, "items": _HOST_CPU}
_VCPU = {"type": "integer", "minimum": 0, "maximum": 4095}
_VCPUS = {"type": "array", "maxItems": 4096, "uniqueItems": True, "items": _VCPU}
# Linux numbers at most 1,024 NUMA nodes.
_NUMA_NODE = {"type": "integer", "minimum": 0, "maximum": 1023}
_PAGE_KB = {"type": "integer", "minimum": 1, "maximum": 2**40}
_NUMA = {
    "type": ["object", "null"],
    "properties": {
        "emulator_isolate": {"type": "boolean"},
        "cells": {
            "type": "array",
            "minItems": 1,
            "maxItems": 64,
            "items": {
                "type": "object",
                "properties": {
                    "guest_cell": {"type": "integer", "minimum": 0, "maximum": 63},
                    "memory_mb": jsonbounds.FLAVOR["properties"]["memory_mb"],
                    "cpuset": _VCPUS,
                    "pcpuset": _VCPUS,
                    "pagesize": {
                        "anyOf": [
                            {"type": "null"},
                            {
                                "enum": [
                                    numa_model.PAGES_SMALL,
                                    numa_model.PAGES_LARGE,
                                    numa_model.PAGES_ANY,
                                ]
                            },
                            _PAGE_KB,
                        ]
                    },
                    "thread_policy": {"enum": list(numa_model.THREAD_POLICIES)},
                    "host_cell": _NUMA_NODE,
                    "pinning": {
                        "type": "array",
                        "maxItems": 4096,
                        "items": {
                            "type": "array",
                            "prefixItems": [_VCPU, _HOST_CPU],
                            "minItems": 2,
                            "maxItems": 2,
                        },
                    },
                    "taken": _HOST_CPUS,
                    "reserved": _HOST_CPUS,
                    "pagesize_kb": {"anyOf": [{"type": "null"}, _PAGE_KB]},
                },
                "required": [
                    "guest_cell",
                    "memory_mb",
                    "cpuset",
                    "pcpuset",
                    "pagesize",
                    "thread_policy",
                    "host_cell",
                    "pinning",
                    "taken",
                    "reserved",
                    "pagesize_kb",
                ],
                "additionalProperties": False,
            },
        },
    },
    "required": ["cells"],
    "additionalProperties": False,
}
_PCI_ADDRESS = {"type": "string", "pattern": pci_address.PATTERN}
_PCI_ID = {"type": "string", "pattern": "\\A[0-9a-fA-F]{4}\\Z"}
_PCI = {
    "type": "array",
    "maxItems": pci_requests.MAX_REQUESTS * pci_requests.MAX_COUNT,
    "items": {
        "type": "object",
        "properties": {
            "address": _PCI_ADDRESS,
            "request_id": {"type": "string", "pattern": pci_requests.REQUEST_ID_PATTERN},
            "vendor_id": _PCI_ID,
            "product_id": _PCI_ID,
            "dev_type": {"enum": list(pci_model.DEVICE_TYPES)},
            "numa_node": {"anyOf": [{"type": "null"}, _NUMA_NODE]},
            "parent_addr": {"anyOf": [{"type": "null"}, _PCI_ADDRESS]},
        },
        "required": ["address", "request_id", "vendor_id", "product_id"],
        "additionalProperties": False,
    },
}
_STATE = {"type": ["string", "null"], "pattern": "\\A[a-z][a-z_-]{0,63}\\Z"}
_OS_TYPE = {"anyOf": [{"type": "null"}, jsonbounds.TEXT]}

# Fields a store of an older schema may lack are optional, with the
# defaults Instance.from_dict and Migration.from_dict give them.
INSTANCE_ROW = {
    "type": "object",
    "properties": {
        "uuid": jsonbounds.UUID,
        "flavor": jsonbounds.FLAVOR,
        "resources": _RESOURCES,
        "volume_backed": {"type": "boolean"},
        "vm_state": {"type": "string", "pattern": "\\A[a-z][a-z_-]{0,63}\\Z"},
        "task_state": _STATE,
        "project_id": jsonbounds.TEXT,
        "os_type": _OS_TYPE,
        "assigned": _ASSIGNED,
        "numa": _NUMA,
        "pci_devices": _PCI,
    },
    "required": ["uuid", "flavor", "resources"],
    "additionalProperties": False,
}

MIGRATION_ROW = {
    "type": "object",
    "properties": {
        "uuid": jsonbounds.UUID,
        "instance_uuid": jsonbounds.UUID,
        "migration_type": {"enum": ["resize", "migration", "live-migration", "evacuation"]},
        "source_node": jsonbounds.UUID,
        "dest_node": jsonbounds.UUID,
        "old_flavor": jsonbounds.FLAVOR,
        "new_flavor": jsonbounds.FLAVOR,
        "old_resources": _RESOURCES,
        "new_resources": _RESOURCES,
        "status": {"type": "string", "pattern": "\\A[a-z][a-z_-]{0,63}\\Z"},
        "seq": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
        "project_id": jsonbounds.TEXT,
        "os_type": _OS_TYPE,
        "vm_state": {"type": "string", "pattern": "\\A[a-z][a-z_-]{0,63}\\Z"},
        "old_assigned": _ASSIGNED,
        "new_assigned": _ASSIGNED,
        "old_numa": _NUMA,
        "new_numa": _NUMA,
        "old_pci": _PCI,
        "new_pci": _PCI,
    },
    "required": [
        "uuid",
        "instance_uuid",
        "migration_type",
        "source_node",
        "dest_node",
        "old_flavor",
        "new_flavor",
        "old_resources",
        "new_resources",
    ],
    "additionalProperties": False,
}

_VALIDATOR = jsonbounds.validator_class()
_CHECKS = {"instances": _VALIDATOR(INSTANCE_ROW), "migrations": _VALIDATOR(MIGRATION_ROW)}


def problem(table, key, body):
    """Why the row ``key`` of ``table`` ("instances" or "migrations"),
    decoded to ``body``, cannot be believed, or None.

    The reason names the first field at fault (its JSON path) and quotes
    the value clipped.
    """
    error = jsonschema.exceptions.best_match(_CHECKS[table].iter_errors(body))
    if error is not None:
        field = _path(error.absolute_path) or "the row"
        return f"{field}: {excerpt.excerpt(error.instance)} is not {_wanted(error)}"
    if body["uuid"] != key:
        return f"uuid: {excerpt.excerpt(body['uuid'])} is not the row's key"
    for prefix in ("", "old_", "new_") if table == "migrations" else ("",):
        reason = _numa_problem(body.get(prefix + "numa"))
        if reason:
            return f"{prefix}numa: {reason}"
    return None


def _numa_problem(claim):
    """Why a NUMA claim's cells do not add up: each pinned vCPU is one of
    the cell's pinned vCPUs, on its own host CPU, kept by the claim."""
    if not claim:
        return None
    for index, cell in enumerate(claim["cells"]):
        vcpus = [v for v, _ in cell["pinning"]]
        pcpus = [p for _, p in cell["pinning"]]
        taken = set(cell["taken"])
        if sorted(vcpus) != sorted(cell["pcpuset"]):
            return f"cells[{index}].pinning pins vCPUs {vcpus}, not the cell's pcpuset"
        if len(set(pcpus)) != len(pcpus):
            return f"cells[{index}].pinning puts two vCPUs on one host CPU: {pcpus}"
        outside = sorted((set(pcpus) | set(cell["reserved"])) - taken)
        if outside:
            return f"cells[{index}] pins host CPUs {outside} that its taken CPUs do not keep"
    return None


def _path(parts):
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _wanted(error):
    """What the schema asked for, in words (jsonschema's own message quotes
    the whole value, which may be a megabyte)."""
    schema, kind = error.schema, error.validator
    if kind == "type":
        return f"of type {error.validator_value}"
    if kind in ("minimum", "maximum"):
        return f"within {schema.get('minimum', '-inf')} to {schema.get('maximum', 'inf')}"
    if kind == "enum":
        return f"one of {', '.join(map(str, error.validator_value))}"
    if kind == "required":
        return f"complete (it needs {', '.join(error.validator_value)})"
    if kind == "additionalProperties":
        return "free of unknown fields"
    return f"valid ({kind} {excerpt.excerpt(error.validator_value)})"


def double_holdings(state):
    """Why ``state``'s claims cannot all be true, or None: a host CPU pinned
    by two different instances, or PCI devices held against the rule every
    holding follows (:func:`rtagent.pci.holding.clash`: a device held twice,
    by one instance or two, a PF beside one of its own VFs). Addresses are
    compared in their one form (rows are read through
    :meth:`~rtagent.pci.held.HeldDevice.from_dict`). O(claims): read once,
    when a node's state is restored."""
    pins = {}
    for consumer, claim in state.numa_held():
        for cpu in claim.pinned:
            other = pins.setdefault(cpu, consumer)
            if other != consumer:
                return f"host CPU {cpu} is pinned by two instances, {other} and {consumer}"
    return holding.clash(
        [(owner, held.address, _parent(state, held)) for owner, held, _ in state.pci_holds()]
    )


def _parent(state, held):
    """The PF of a held VF: as the row says, else as the host reports it (a
    row written before parent_addr was kept, or a copied row)."""
    if held.parent_addr is not None:
        return held.parent_addr
    dev = state.pci_devices.get(held.address) if state.pci_devices is not None else None
    return dev.host.parent_addr if dev is not None else None


# What a refusal tells the operator to do; docs/operations.md says it at
# length.
ROW_HELP = (
    "rtagent writes no such row: restore the state directory from a backup, or remove "
    'the row and claim its instance again (docs/operations.md, "A store that does not '
    'add up")'
)
ROWS_HELP = (
    "rtagent writes no such rows: restore the state directory from a backup, or remove "
    'the wrong row and claim its instance again (docs/operations.md, "A store that does '
    'not add up")'
)
