# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""JSON Schema parts, and the validator, that the RPC contract and the
state store check values with: a value the agent accepted from a caller
and wrote down must pass the same bounds when it is read back.

Patterns are Python regular expressions anchored with \\A and \\Z ("$"
would also match before a trailing newline).
"""

import math

import jsonschema

# Canonical hyphenated form only; normalised to lower case by the endpoint.
UUID = {
    "type": "string",
    "pattern": "\\A[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\\Z",
}

# Characters no text may hold (nor any string or key anywhere in a call's
# arguments): C0 and C1 controls, DEL, the bidirectional controls (ALM,
# LRM, RLM, LRE..RLO, LRI..PDI), the line and paragraph separators, and
# surrogates (a lone one is not text).
FORBIDDEN_CHARACTERS = (
    "\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f"
    "\\u2028-\\u202e\\u2066-\\u2069\\ud800-\\udfff"
)

TEXT_PATTERN = f"\\A[^{FORBIDDEN_CHARACTERS}]*\\Z"
TEXT = {"type": "string", "maxLength": 255, "pattern": TEXT_PATTERN}

FLAVOR = {
    "type": "object",
    "properties": {
        "vcpus": {"type": "integer", "minimum": 1, "maximum": 4096},
        # MiB; up to 64 TiB.
        "memory_mb": {"type": "integer", "minimum": 1, "maximum": 64 * 1024 * 1024},
        # GiB; up to 1 PiB each.
        "root_gb": {"type": "integer", "minimum": 0, "maximum": 1024 * 1024},
        "ephemeral_gb": {"type": "integer", "minimum": 0, "maximum": 1024 * 1024},
        "swap_mb": {"type": "integer", "minimum": 0, "maximum": 64 * 1024 * 1024},
        "name": TEXT,
    },
    "required": ["vcpus", "memory_mb"],
    "additionalProperties": False,
}

# A resource class name, as Placement spells standard and custom ones.
RESOURCE_CLASS_PATTERN = "\\A[A-Z][A-Z0-9_]{0,254}\\Z"


def validator_class():
    """Draft 2020-12 with JSON's types as a caller means them: an integer is
    an int (2.0 and 1e308 are not), a number is finite (NaN and infinities
    are not)."""
    base = jsonschema.Draft202012Validator

    def is_integer(checker, value):
        return isinstance(value, int) and not isinstance(value, bool)

    def is_number(checker, value):
        return is_integer(checker, value) or (isinstance(value, float) and math.isfinite(value))

    checker = base.TYPE_CHECKER.redefine_many({"integer": is_integer, "number": is_number})
    return jsonschema.validators.extend(base, type_checker=checker)
