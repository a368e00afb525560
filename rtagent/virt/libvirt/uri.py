# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Syntax check of libvirt connection URIs, done before anything connects.

libvirt itself is a poor judge: it treats almost any string as a driver name
or an alias and fails later, at connect time, with a message about sockets.
Checking the shape up front turns a typo in config into a one-line error at
start-up instead of an agent that never manages to audit.
"""

import re

from rtagent.virt import errors

FORM = "driver[+transport]://[user@][host][:port]/[path][?query]"

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*(\+[A-Za-z][A-Za-z0-9_-]*)?")
# user@ and host may be empty (local URIs such as qemu:///system). An IPv6
# host is written in brackets, as in any URL.
_AUTHORITY = re.compile(
    r"((?P<user>[^@/?#\s]+)@)?"
    r"(?P<host>[A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\])"
    r"(:(?P<port>[0-9]{1,5}))?"
)
_PATH_AND_QUERY = re.compile(r"/[^?#\s]*(\?[^#\s]*)?")
_MAX_PORT = 65535


def validate_uri(uri):
    """Check that ``uri`` has the shape of a libvirt connection URI.

    Accepts ``driver[+transport]://[user@][host][:port]/[path][?query]``,
    e.g. ``qemu:///system``, ``qemu+ssh://root@host/system``,
    ``test:///default``, ``test:///abs/path/host.xml``. It checks syntax
    only: whether the driver exists or the host answers is known at connect
    time.

    :param uri: the URI string.
    :returns: ``uri`` unchanged, so callers can validate in an expression.
    :raises rtagent.virt.errors.InvalidConnectionURI: the URI is empty, not a
        string, or not of the form above; the reason says what is wrong.
    """
    if not isinstance(uri, str) or not uri:
        _invalid(uri, "it is empty")
    if any(ch.isspace() for ch in uri):
        _invalid(uri, "it contains whitespace")
    scheme, colon, rest = uri.partition(":")
    if not colon or not scheme:
        _invalid(uri, f"no driver scheme; expected {FORM}")
    if not _SCHEME.fullmatch(scheme):
        _invalid(uri, f"bad driver[+transport] {scheme!r}; expected {FORM}")
    if not rest.startswith("//"):
        _invalid(uri, f"expected '//' after '{scheme}:'; expected {FORM}")
    authority, slash, path = rest[2:].partition("/")
    if not slash:
        _invalid(uri, f"no '/' before the path; expected {FORM}")
    match = _AUTHORITY.fullmatch(authority)
    if match is None:
        _invalid(uri, f"bad [user@][host][:port] {authority!r}")
    port = match.group("port")
    if port is not None and not 0 < int(port) <= _MAX_PORT:
        _invalid(uri, f"port {port} is out of range")
    if not _PATH_AND_QUERY.fullmatch("/" + path):
        _invalid(uri, f"bad path or query {'/' + path!r}")
    return uri


def _invalid(uri, reason):
    raise errors.InvalidConnectionURI(uri=uri, reason=reason)
