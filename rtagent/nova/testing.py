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

Proof of injection: with ``RTAGENT_NOVA_PROOF_DIR`` set, the fixture of a
test writes ``<dir>/<test id>.json`` at its clean-up, counted from
rtagent's side: the compute managers the test built, the trackers of
rtagent's built (one per compute manager, in its ``__init__``), the links
to an agent they opened, and the agent calls those trackers made and the
agent answered. ``tools/nova_tests.py`` counts a test that passed without
such a record (or with a compute manager that rtagent's tracker did not
serve) as ``not_injected``.

A fault for the harness's own tests: with ``RTAGENT_NOVA_FAULT_ONCE``
naming a file that does not exist, the first ``instance_claim`` any agent
is asked for creates that file and is refused with
``rtagent.injected_fault``; later runs see the file and are not touched.
This is how a flake that rtagent would cause is made on purpose.
"""

import json
import os
import shutil
import tempfile
import threading

import fixtures

from rtagent.nova import guard, inprocess, virtapi
from rtagent.nova import resource_tracker as rt
from rtagent.nova.link import AgentRefused

MODES = ("inprocess", "rpc")
PROOF_DIR_ENV = "RTAGENT_NOVA_PROOF_DIR"
FAULT_ONCE_ENV = "RTAGENT_NOVA_FAULT_ONCE"
INJECTED_FAULT = "rtagent.injected_fault"
# The Placement fixture of the running test (set by testhook).
_placement = {"endpoint": None}


def placement_started(endpoint):
    """Record the endpoint of the test's Placement fixture."""
    _placement["endpoint"] = endpoint


def _following_adapter_class():
    from keystoneauth1 import adapter

    class FollowsTheTestsPlacement(adapter.Adapter):
        """Sends to the test's current Placement fixture: a test may stop
        its fixture and start another over the same database (a new
        endpoint) while a compute service and its agent run on, as
        ``regressions.test_bug_1679750`` does; nova's report client follows
        it the same way."""

        @property
        def endpoint_override(self):
            return _placement["endpoint"] or self._first_endpoint

        @endpoint_override.setter
        def endpoint_override(self, value):
            self._first_endpoint = value

    return FollowsTheTestsPlacement


class RtagentTrackerFixture(fixtures.Fixture):
    """:param mode: one of :data:`MODES`.
    :param test_id: the id of the test it serves, for its proof record.
    """

    def __init__(self, mode="inprocess", test_id=None):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.test_id = test_id
        self._links = {}
        self._mutex = threading.Lock()
        self.counts = {
            "compute_managers": 0,
            "trackers": 0,
            "links": 0,
            "agent_calls": 0,
            "agent_answers": 0,
        }

    def _setUp(self):  # noqa: N802 - the fixtures library names it
        from nova.compute import manager, resource_tracker

        # Each test's own Placement: one that starts none must not reach
        # the previous test's (its agents then have none to sync).
        _placement["endpoint"] = None
        self.addCleanup(_placement.update, endpoint=None)
        proof_dir = os.environ.get(PROOF_DIR_ENV)
        if proof_dir and self.test_id:
            # Registered first, so it runs last: after every link closed.
            self.addCleanup(self._write_proof, proof_dir)
        root = tempfile.mkdtemp(prefix="rtagent-nova-")
        self.addCleanup(shutil.rmtree, root, True)
        self._root = root
        self.addCleanup(self._close_all)
        self.useFixture(
            fixtures.MonkeyPatch(
                "nova.compute.manager.ComputeManager.__init__",
                self._counted_init(manager.ComputeManager.__init__, "compute_managers"),
            )
        )
        nova_tracker = resource_tracker.ResourceTracker
        for name, refused in guard.patches(nova_tracker):
            self.useFixture(fixtures.MockPatchObject(nova_tracker, name, refused))
        for name, routed in virtapi.patches(manager.ComputeVirtAPI):
            self.useFixture(fixtures.MockPatchObject(manager.ComputeVirtAPI, name, routed))
        self.useFixture(
            fixtures.MonkeyPatch(
                "nova.compute.resource_tracker.ResourceTracker", self._counted_class()
            )
        )

    def _counted_class(self):
        """rtagent's tracker class, counting the trackers built from it."""
        cls = rt.tracker_class(self._make_link)
        cls.__init__ = self._counted_init(cls.__init__, "trackers")
        return cls

    def _counted_init(self, init, key):
        """``init``, counting in ``counts[key]`` the objects it builds."""

        def __init__(obj, *args, **kwargs):  # noqa: N807 - it replaces one
            with self._mutex:
                self.counts[key] += 1
            init(obj, *args, **kwargs)

        return __init__

    def _counted(self, call):
        """``call`` of a link, counted; refused once if a fault is asked for."""

        def counted(method, **args):
            with self._mutex:
                self.counts["agent_calls"] += 1
            if method == "instance_claim":
                _fault_once(method)
            try:
                result = call(method, **args)
            except AgentRefused:
                self._answered()  # an error envelope is an answer too
                raise
            self._answered()
            return result

        return counted

    def _answered(self):
        with self._mutex:
            self.counts["agent_answers"] += 1

    def _write_proof(self, proof_dir):
        record = dict(self.counts, test=self.test_id, mode=self.mode)
        path = os.path.join(proof_dir, f"{self.test_id}.json")
        with open(f"{path}.tmp", "w") as f:
            json.dump(record, f)
        os.replace(f"{path}.tmp", path)

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
            adapter=admin_adapter(endpoint, adapter_class=_following_adapter_class()),
            state_path=state,
            local_node_uuid=virt_node.get_local_node_uuid,
        )
        if self.mode == "rpc":
            link = _served(link, host)
        link.call = self._counted(link.call)
        with self._mutex:
            self._links[host] = link
            self.counts["links"] += 1
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


def _fault_once(method):
    """Refuse ``method`` if :data:`FAULT_ONCE_ENV` names a file not made yet."""
    marker = os.environ.get(FAULT_ONCE_ENV)
    if not marker:
        return
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return
    raise AgentRefused(method, INJECTED_FAULT, f"a one-time fault asked for by {FAULT_ONCE_ENV}")


def _served(local, host):
    """The agent behind ``local`` served over oslo.messaging, and a link
    that calls it there."""
    from rtagent.nova.rpcserved import ServedLink

    return ServedLink(local, host)
