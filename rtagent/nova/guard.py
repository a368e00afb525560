# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova's own ResourceTracker made unusable while rtagent's is in place.

Constructing it, or calling any of its methods, raises
:class:`NovaTrackerUsed`: a test that passes with the guard on proves that
rtagent did the accounting, not nova's tracker behind its back.
"""

import inspect


class NovaTrackerUsed(AssertionError):
    """nova's ResourceTracker was constructed or called."""


def _refuse(name):
    def refused(*args, **kwargs):
        raise NovaTrackerUsed(
            f"nova.compute.resource_tracker.ResourceTracker.{name} was called while "
            "rtagent's tracker is in place"
        )

    refused.__name__ = name
    return refused


def patches(nova_tracker_class):
    """``(attribute name, refusing replacement)`` for ``__init__`` and every
    method ``nova_tracker_class`` defines, to apply with a monkeypatch."""
    methods = sorted(
        name
        for name, member in vars(nova_tracker_class).items()
        if inspect.isfunction(member) and not name.startswith("__")
    )
    return [(name, _refuse(name)) for name in ("__init__", *methods)]
