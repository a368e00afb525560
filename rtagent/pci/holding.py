# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""What the devices held on one node may be, whoever holds them: the rule
every path that makes or restores a holding checks (a claim's choice,
``running_devices``, an attach, the store's load check). Pure.

A device is held once, and a PF never beside one of its own VFs: the
guest given the second copy fails to start, or two guests share a NIC.
Whether a device may serve a given request (it matches, a PF only for a
request asking for PFs) is the request's rule, in
:mod:`rtagent.pci.pools`; this one needs no request, so that a stored row,
which keeps the devices but not the specs they were chosen by, is checked
by it too.

Addresses are compared as given: callers pass them in their one form
(:func:`rtagent.pci.address.canonical`).
"""


def clash(holds):
    """Why ``holds`` cannot all be true at once, or None.

    :param holds: ``(owner, address, parent address or None)`` triples, the
        owner an instance UUID (or any label for the holder).
    :returns: one line naming the device(s) and owner(s) at fault: a device
        held twice (by one instance or two), or a PF held beside its VF.
    """
    owners = {}
    for owner, address, _ in holds:
        if address not in owners:
            owners[address] = owner
        elif owners[address] != owner:
            return f"PCI device {address} is held by two instances, {owners[address]} and {owner}"
        else:
            return f"PCI device {address} is held twice by instance {owner}"
    for owner, address, parent in holds:
        if parent is not None and parent in owners:
            if owners[parent] == owner:
                return f"PF {parent} is held beside its own VF {address} by instance {owner}"
            return f"PF {parent} ({owners[parent]}) is held beside its VF {address} ({owner})"
    return None
