# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The one form of a PCI address: ``dddd:bb:ss.f`` in lower-case hex, the
form nova's libvirt driver writes (``"%04x:%02x:%02x.%1x"``).

Every address is put in this form where it enters the agent (an RPC
argument, a stored row, libvirt's XML), so that every comparison, set and
dictionary key inside works on one spelling: ``0000:3B:02.0`` and
``0000:3b:02.0`` are one device, never two.
"""

import re

from rtagent.pci import errors

# What the RPC contract and the store's rows accept (either case).
PATTERN = "\\A[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]\\Z"
_FORM = re.compile(PATTERN)


def canonical(text, field=None):
    """``text`` as ``dddd:bb:ss.f`` in lower-case hex.

    :param field: where the value came from, for the error.
    :raises errors.InvalidRequest: ``text`` is not a PCI address.
    """
    if not isinstance(text, str) or not _FORM.match(text):
        raise errors.InvalidRequest(
            reason=f"{text!r} is not a PCI address (dddd:bb:ss.f)", field=field
        )
    return text.lower()


def from_parts(domain, bus, slot, function):
    """The address of integer parts (libvirt's XML gives them as numbers)."""
    return f"{domain:04x}:{bus:02x}:{slot:02x}.{function:x}"
