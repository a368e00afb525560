# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""nova's service enable and disable, routed to the agent.

When an operator disables or enables a compute service, nova-api saves the
service record and asks the host (``set_host_enabled``), whose
ComputeManager calls ``ComputeVirtAPI.update_compute_provider_status`` for
each of its nodes. nova's version writes COMPUTE_STATUS_DISABLED through
its report client's provider cache, which is empty beside rtagent (the
agent owns the provider tree), so every call logged a traceback and the
trait waited for the next periodic. Here the call goes to rtagent's
tracker, which tells the agent; the agent's prompt sync puts the trait in
Placement within a second.
"""

from rtagent.nova import resource_tracker as rt


def _routed(original):
    def update_compute_provider_status(virtapi, context, rp_uuid, enabled):
        tracker = getattr(getattr(virtapi, "_compute", None), "rt", None)
        if isinstance(tracker, rt.RtagentResourceTracker):
            return tracker.update_compute_provider_status(context, rp_uuid, enabled)
        return original(virtapi, context, rp_uuid, enabled)

    update_compute_provider_status.__doc__ = original.__doc__
    update_compute_provider_status.rtagent_routed = True
    return update_compute_provider_status


def patches(virtapi_class):
    """``(attribute name, replacement)`` to apply to nova's
    ``ComputeVirtAPI`` with a monkeypatch (none if already applied)."""
    original = virtapi_class.update_compute_provider_status
    if getattr(original, "rtagent_routed", False):
        return []
    return [("update_compute_provider_status", _routed(original))]
