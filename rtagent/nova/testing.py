# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""rtagent as the tracker of the compute services nova's functional tests
start: one fixture, :class:`RtagentTrackerFixture`.

Each compute service gets its own agent (its own state directory, kept
across a restart of that service) over the test's virt driver, syncing the
test's Placement. nova's own ResourceTracker is guarded (:mod:`.guard`).

Two ways to the agent, as in production: ``inprocess`` calls the agent's RPC
endpoint in the process; ``rpc`` serves the agent with an oslo.messaging
RPC server on a transport of its own (the in-memory ``fake://`` driver, which
serialises every message as JSON) and calls it with the RPC client.
"""

import os
import shutil
import tempfile
import threading

import fixtures

from rtagent.nova import guard, inprocess
from rtagent.nova import tracker as rt

MODES = ("inprocess", "rpc")
# The Placement fixture of the running test (set by testhook).
_placement = {"endpoint": None}


def placement_started(endpoint):
    """Record the endpoint of the test's Placement fixture."""
    _placement["endpoint"] = endpoint


class RtagentTrackerFixture(fixtures.Fixture):
    """:param mode: one of :data:`MODES`."""

    def __init__(self, mode="inprocess"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self._links = {}
        self._mutex = threading.Lock()

    def _setUp(self):  # noqa: N802 - the fixtures library names it
        from nova.compute import resource_tracker

        root = tempfile.mkdtemp(prefix="rtagent-nova-")
        self.addCleanup(shutil.rmtree, root, True)
        self._root = root
        self.addCleanup(self._close_all)
        nova_tracker = resource_tracker.ResourceTracker
        for name, refused in guard.patches(nova_tracker):
            self.useFixture(fixtures.MockPatchObject(nova_tracker, name, refused))
        self.useFixture(
            fixtures.MonkeyPatch(
                "nova.compute.resource_tracker.ResourceTracker", rt.tracker_class(self._make_link)
            )
        )

    def _make_link(self, host, virt_driver, reportclient):
        from nova.conf import CONF
        from nova.virt import node as virt_node

        from rtagent.testing.placement_server import admin_adapter

        endpoint = _placement["endpoint"]
        if endpoint is None:
            raise RuntimeError("rtagent's tracker needs the test's Placement fixture")
        with self._mutex:
            # A restarted compute service gets a new tracker: the agent of
            # the old one lets go of the state directory first.
            old = self._links.pop(host, None)
        if old is not None:
            old.close()
        state = os.path.join(self._root, host)
        link = inprocess.local_link(
            CONF,
            host,
            virt_driver,
            adapter=admin_adapter(endpoint),
            state_path=state,
            local_node_uuid=virt_node.get_local_node_uuid,
        )
        if self.mode == "rpc":
            link = _served(link, host)
        with self._mutex:
            self._links[host] = link
        return link

    def link(self, host):
        """The link of ``host``'s compute service (KeyError if none yet)."""
        with self._mutex:
            return self._links[host]

    def _close_all(self):
        with self._mutex:
            links, self._links = list(self._links.values()), {}
        for link in links:
            link.close()


def _served(local, host):
    """The agent behind ``local`` served over oslo.messaging, and a link
    that calls it there."""
    from rtagent.nova.rpcserved import ServedLink

    return ServedLink(local, host)
