"""JSON schemas of the RPC API 1.x arguments: one per method.

These are the contract published in docs/rpc-api.md (generated from here by
``python -m rtagent.rpc.schemas``). Every schema forbids unknown arguments;
sizes are bounded so that no call can make the agent do unbounded work.
Bounds are generous for real flavors (nova's own limits are lower) and
exist to refuse garbage, not to police capacity: fit is the tracker's job.
"""

import json

from rtagent import cpuspec, jsonbounds
from rtagent.pci import address as pci_address
from rtagent.pci import pools
from rtagent.pci import requests as pci_requests

# Patterns are Python regular expressions anchored with \A and \Z ("$" would
# also match before a trailing newline). The parts the store checks its
# rows with too live in rtagent.jsonbounds.
UUID = jsonbounds.UUID
FORBIDDEN_CHARACTERS = jsonbounds.FORBIDDEN_CHARACTERS
_TEXT_PATTERN = jsonbounds.TEXT_PATTERN
_TEXT = jsonbounds.TEXT
FLAVOR = jsonbounds.FLAVOR

# A whole call's arguments, serialised as JSON, may not exceed this.
MAX_ARGUMENTS_BYTES = 64 * 1024

# Containers nested in the arguments (the arguments object is level 1).
MAX_ARGUMENTS_DEPTH = 32

# The raw message (oslo.messaging's JSON text: arguments, context and
# envelope), checked before it is decoded; and the nesting beyond which
# Python's own decoder would fail, which is cut off at decoding.
MAX_MESSAGE_CHARS = 1024 * 1024
MAX_MESSAGE_DEPTH = 64

_LIMIT = {"type": ["number", "null"], "minimum": 0, "maximum": 1e12}

# Nova's scheduler limits; numa_topology is accepted and not read (the
# node's own allocation ratios bound its NUMA cells).
LIMITS = {
    "type": ["object", "null"],
    "properties": {
        "vcpu": _LIMIT,
        "memory_mb": _LIMIT,
        "disk_gb": _LIMIT,
        "numa_topology": {"type": ["object", "null"], "maxProperties": 64},
    },
    "additionalProperties": False,
}

# 1.3: a flavor's extra specs and an image's properties, as nova holds them.
# Only nova's NUMA and CPU keys are read (rtagent.numa.constraints); any
# other is accepted and ignored, so a caller may pass them all.
MAX_SPECS = 256
# Image property values other than the keys read are free text in Glance
# (a signature, a description): longer than a flavor's 255 characters.
MAX_IMAGE_VALUE_CHARS = 4096

_SPEC_NAME = {"minLength": 1, "maxLength": 255, "pattern": _TEXT_PATTERN}

# Values in nova's CPU list syntax ("0-3,^2") name vCPUs, below FLAVOR's
# 4096: a run of 5 digits (or underscores, which Python's int() takes
# between digits) is refused, as expanding a range such as "0-9999999999"
# would take the agent hours.
_CPU_LIST_PATTERN = f"\\A(?!.*[\\d_]{{5}})[^{FORBIDDEN_CHARACTERS}]*\\Z"

EXTRA_SPECS = {
    "type": ["object", "null"],
    "propertyNames": _SPEC_NAME,
    "patternProperties": {
        "\\Ahw:(numa_cpus\\.[0-9]+|cpu_dedicated_mask)\\Z": {
            "type": "string",
            "maxLength": 255,
            "pattern": _CPU_LIST_PATTERN,
        },
    },
    "additionalProperties": _TEXT,
    "maxProperties": MAX_SPECS,
}


def _image_value(pattern):
    return {
        "type": ["string", "integer", "boolean", "null"],
        "maxLength": MAX_IMAGE_VALUE_CHARS,
        "pattern": pattern,
        "minimum": -(2**63),
        "maximum": 2**63 - 1,
    }


IMAGE_PROPERTIES = {
    "type": ["object", "null"],
    "propertyNames": _SPEC_NAME,
    "patternProperties": {"\\Ahw_numa_cpus\\.[0-9]+\\Z": _image_value(_CPU_LIST_PATTERN)},
    "additionalProperties": _image_value(_TEXT_PATTERN),
    "maxProperties": MAX_SPECS,
}

# resource class -> number of identified units to assign (see the tracker).
ASSIGNED = {
    "type": ["object", "null"],
    "propertyNames": {"pattern": jsonbounds.RESOURCE_CLASS_PATTERN},
    "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 1024},
    "maxProperties": 16,
}

# 1.4: PCI requests (docs/rpc-api.md, "PCI devices"): by alias or by spec,
# bounded like extra_specs; the rules between fields (alias or spec, a known
# alias, ids 4 hex digits) are the tracker's (pci.invalid_request).
PCI_SPEC = {
    "type": "object",
    "propertyNames": {"pattern": pci_requests.SPEC_KEY_PATTERN},
    "additionalProperties": {
        # null: the device must not have the tag (a tunnel port's
        # physical_network).
        "type": ["string", "integer", "boolean", "null"],
        "maxLength": pci_requests.MAX_VALUE_CHARS,
        "pattern": _TEXT_PATTERN,
        "minimum": 0,
        "maximum": 65535,
    },
    "minProperties": 1,
    "maxProperties": pci_requests.MAX_SPEC_KEYS,
}

PCI_REQUESTS = {
    "type": ["array", "null"],
    "maxItems": pci_requests.MAX_REQUESTS,
    "items": {
        "type": "object",
        "properties": {
            "alias": {"type": "string", "minLength": 1, "maxLength": 256, "pattern": _TEXT_PATTERN},
            "spec": {
                "type": "array",
                "minItems": 1,
                "maxItems": pci_requests.MAX_SPECS,
                "items": PCI_SPEC,
            },
            "count": {"type": "integer", "minimum": 1, "maximum": pci_requests.MAX_COUNT},
            "numa_policy": {"enum": list(pools.NUMA_POLICIES)},
            "request_id": {"type": "string", "pattern": pci_requests.REQUEST_ID_PATTERN},
        },
        "required": ["count"],
        "additionalProperties": False,
    },
}

# 1.6: the requests of devices attached to a running instance: at least
# one, each with its own request id.
ATTACHED_PCI_REQUESTS = {
    "type": "array",
    "minItems": 1,
    "maxItems": pci_requests.MAX_REQUESTS,
    "items": {**PCI_REQUESTS["items"], "required": ["count", "request_id"]},
}

# 1.6: devices of an instance to give back, by address (dddd:bb:ss.f).
PCI_ADDRESSES = {
    "type": "array",
    "minItems": 1,
    "maxItems": 64,
    "uniqueItems": True,
    "items": {
        "type": "string",
        # Either case: the tracker puts each in its one form
        # (rtagent.pci.address), and refuses a device named twice.
        "pattern": pci_address.PATTERN,
    },
}

# 1.5: the host CPUs a guest already runs pinned on (an instance claimed
# after the fact): ids as cpu_dedicated_set takes them, no repeats.
RUNNING_CPUS = {
    "type": ["array", "null"],
    "maxItems": 4096,
    "uniqueItems": True,
    "items": {"type": "integer", "minimum": 0, "maximum": cpuspec.MAX_CPU_ID},
}

# 1.7: the devices a guest already runs with (an instance claimed after
# the fact), by the request id they serve.
RUNNING_DEVICES = {
    "type": ["object", "null"],
    "maxProperties": pci_requests.MAX_REQUESTS,
    "propertyNames": {"pattern": pci_requests.REQUEST_ID_PATTERN},
    "additionalProperties": PCI_ADDRESSES,
}

# nova.compute.vm_states
VM_STATES = (
    "active",
    "building",
    "paused",
    "suspended",
    "stopped",
    "rescued",
    "resized",
    "soft-delete",
    "deleted",
    "error",
    "shelved",
    "shelved_offloaded",
)

MOVE_TYPES = ("resize", "migration", "live-migration", "evacuation")

# 1.8: nova's states of the instance, for the scheduler's stats.
_TASK_STATE = {"type": ["string", "null"], "pattern": "\\A[a-z][a-z_]{0,63}\\Z"}
_OS_TYPE = {"anyOf": [{"type": "null"}, _TEXT]}
INSTANCE_STATES = {
    # shelved_offloaded: an instance being unshelved here (task spawning).
    "vm_state": {"enum": [s for s in VM_STATES if s != "deleted"]},
    "task_state": _TASK_STATE,
    "os_type": _OS_TYPE,
}

_NODE = {"node_uuid": UUID}


def _method(properties=None, required=()):
    props = dict(_NODE)
    props.update(properties or {})
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


METHODS = {
    "ping": {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    },
    "instance_claim": _method(
        {
            "instance_uuid": UUID,
            "flavor": FLAVOR,
            "limits": LIMITS,
            "volume_backed": {"type": "boolean"},
            "project_id": _TEXT,
            "assigned": ASSIGNED,
            # 1.1: with a user_id the agent writes the allocation to
            # Placement itself (standalone mode, no Nova scheduler).
            "user_id": _TEXT,
            # 1.3: the guest's NUMA topology, pinned CPUs and page size.
            "extra_specs": EXTRA_SPECS,
            "image_properties": IMAGE_PROPERTIES,
            # 1.4: the instance's PCI devices.
            "pci_requests": PCI_REQUESTS,
            # 1.5: the CPUs a running pinned guest keeps.
            "running_cpus": RUNNING_CPUS,
            # 1.7: the PCI devices it keeps.
            "running_devices": RUNNING_DEVICES,
            # 1.8: nova's states of the instance.
            **INSTANCE_STATES,
        },
        required=("instance_uuid", "flavor"),
    ),
    "abort_instance_claim": _method({"instance_uuid": UUID}, required=("instance_uuid",)),
    "update_instance": _method(
        {
            "instance_uuid": UUID,
            "vm_state": {"enum": [*VM_STATES, None]},
            "task_state": _TASK_STATE,
            # 1.8: the image's os_type and the instance's project.
            "os_type": _OS_TYPE,
            "project_id": _TEXT,
        },
        required=("instance_uuid",),
    ),
    "start_move": _method(
        {
            "migration_uuid": UUID,
            "instance_uuid": UUID,
            "migration_type": {"enum": list(MOVE_TYPES)},
            "source_node": UUID,
            "dest_node": UUID,
            "old_flavor": FLAVOR,
            "new_flavor": {"anyOf": [FLAVOR, {"type": "null"}]},
            "volume_backed": {"type": "boolean"},
            "limits": LIMITS,
            "assigned": ASSIGNED,
            # 1.3: the new flavor's extra specs, and the image's properties.
            "extra_specs": EXTRA_SPECS,
            "image_properties": IMAGE_PROPERTIES,
            # 1.4: the PCI devices the instance asks for at the destination.
            "pci_requests": PCI_REQUESTS,
            # 1.8: nova's states of the instance, and its project.
            **INSTANCE_STATES,
            "project_id": _TEXT,
        },
        required=(
            "migration_uuid",
            "instance_uuid",
            "migration_type",
            "source_node",
            "dest_node",
            "old_flavor",
        ),
    ),
    "finish_move": _method({"migration_uuid": UUID}, required=("migration_uuid",)),
    "confirm_move": _method({"migration_uuid": UUID}, required=("migration_uuid",)),
    "revert_move": _method({"migration_uuid": UUID}, required=("migration_uuid",)),
    "build_failed": _method(),
    "build_succeeded": _method(),
    "set_disabled": _method(
        {"disabled": {"type": "boolean"}, "reason": _TEXT},
        required=("disabled",),
    ),
    "get_compute_node": _method(),
    "get_status": _method(),
    # 1.6: devices attached to and detached from a claimed instance.
    "attach_pci_devices": _method(
        {"instance_uuid": UUID, "pci_requests": ATTACHED_PCI_REQUESTS},
        required=("instance_uuid", "pci_requests"),
    ),
    "detach_pci_devices": _method(
        {"instance_uuid": UUID, "addresses": PCI_ADDRESSES},
        required=("instance_uuid", "addresses"),
    ),
    # 1.2: what the node holds of one instance (read back an outcome).
    "get_instance": _method({"instance_uuid": UUID}, required=("instance_uuid",)),
}


def main():
    """Print every method's schema (for docs/rpc-api.md)."""
    for name, schema in METHODS.items():
        print(f"### {name}\n\n```json\n{json.dumps(schema, indent=2)}\n```\n")


if __name__ == "__main__":
    main()
