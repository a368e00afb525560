# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Parsing libvirt's XML answers, with errors the driver understands."""

import xml.etree.ElementTree as ET

from rtagent.virt import errors


def parse(text, what):
    """Parse ``text`` (libvirt's XML) or raise HostReadError naming ``what``."""
    if not isinstance(text, str) or not text.strip():
        raise errors.HostReadError(what=what, reason=f"got {text!r}")
    try:
        # libvirt's own output, over its own socket: not untrusted input.
        return ET.fromstring(text)  # noqa: S314
    except ET.ParseError as exc:
        raise errors.HostReadError(what=what, reason=f"bad XML: {exc}") from exc


def int_attr(elem, name, what, default=None):
    """``int(elem.get(name))``; ``default`` if absent; HostReadError if bad."""
    value = elem.get(name)
    if value is None:
        if default is None:
            raise errors.HostReadError(what=what, reason=f"<{elem.tag}> has no {name}")
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise errors.HostReadError(what=what, reason=f"{name}={value!r}") from exc


def int_text(elem, what):
    try:
        return int((elem.text or "").strip())
    except ValueError as exc:
        raise errors.HostReadError(what=what, reason=f"<{elem.tag}>{elem.text}") from exc


def kib(elem, what):
    """The size in ``elem`` (text, ``unit`` attribute) in KiB."""
    units = {
        "b": 1 / 1024,
        "bytes": 1 / 1024,
        "kib": 1,
        "k": 1,
        "mib": 1024,
        "m": 1024,
        "gib": 1024**2,
        "g": 1024**2,
    }
    unit = (elem.get("unit") or "KiB").lower()
    if unit not in units:
        raise errors.HostReadError(what=what, reason=f"unknown unit {unit!r}")
    return int(int_text(elem, what) * units[unit])
