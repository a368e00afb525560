# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""What nova's scheduler reads of a node equals what stock nova writes
(issue 48): the ComputeNode record's ``stats``, ``current_workload`` and
``running_vms``, after each periodic, against nova's own
``nova.compute.stats.Stats`` fed the node's instances as nova's periodic
feeds them (the oracle); a state nova changes without telling its tracker
costs one agent call at the next periodic, and a move that only waits for
its confirmation costs no call and no INFO line. Run by ``make test-nova``
in .venv-nova, in process.
"""

import logging

from nova import context as nova_context
from nova import objects
from nova.compute import stats as nova_stats
from nova.compute import vm_states
from nova.tests.functional import integrated_helpers

from rtagent.nova.testing import RtagentTrackerFixture, placement_started
from tests.nova.harness import KeepsTestMethod, PatientWaits

# What a steady periodic asks the agent, in order: nova's repeat of the
# service's state (a no-op for the agent), then its two reads.
STEADY = ["set_disabled", "get_status", "get_compute_node"]


def novas_own(ctxt, host, nodename, failed_builds=0):
    """(stats, current_workload, running_vms) as nova's periodic writes
    them for the node's instances: its Stats cleared (failed_builds kept),
    then every instance the node holds resources for counted once."""
    stats = nova_stats.Stats()
    stats["failed_builds"] = failed_builds
    for instance in objects.InstanceList.get_by_host_and_node(ctxt, host, nodename):
        if not vm_states.allow_resource_removal(
            vm_state=instance.vm_state, task_state=instance.task_state
        ):
            stats.update_stats_for_instance(instance)
    # ComputeNode.stats holds strings.
    return {k: str(v) for k, v in stats.items()}, stats.calculate_workload(), stats.num_instances


def written(ctxt, host, nodename):
    cn = objects.ComputeNode.get_by_host_and_nodename(ctxt, host, nodename)
    return dict(cn.stats), cn.current_workload, cn.running_vms


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        if record.levelno == logging.INFO:
            self.lines.append(f"{record.name}: {record.getMessage()}")


class _States(KeepsTestMethod, PatientWaits):
    compute_driver = "fake.MediumFakeDriver"
    mode = None

    def setUp(self):
        super().setUp()
        self.rtagent = self.useFixture(RtagentTrackerFixture(self.mode))
        placement_started(self.placement.fixture.endpoint)
        self.computes = {h: self._start_compute(h) for h in ("host1", "host2")}
        self.flavors = self.api.get_flavors()
        self.ctxt = nova_context.get_admin_context()

    def _recorded(self, host):
        """The list of methods ``host``'s tracker asks its agent, from now on."""
        link = self.rtagent.link(host)
        real = link.call
        calls = []

        def recording(method, **args):
            calls.append(method)
            return real(method, **args)

        link.call = recording
        self.addCleanup(setattr, link, "call", real)
        return calls

    def _assert_as_nova_writes(self, step):
        self._run_periodics(raise_on_error=True)
        for host in self.computes:
            nodename = self.computes[host].manager.driver.get_available_nodes()[0]
            self.assertEqual(
                novas_own(self.ctxt, host, nodename),
                written(self.ctxt, host, nodename),
                f"{step}: {host}'s ComputeNode record differs from nova's Stats",
            )

    def test_stats_are_novas_after_each_step(self):
        first = self._boot_and_check_allocations(self.flavors[0], "host1")
        second = self._create_server(flavor_id=self.flavors[0]["id"], host="host1", networks="none")
        self._assert_as_nova_writes("two boots")
        stats, workload, running = written(self.ctxt, "host1", "host1")
        # What the issue saw wrong on main: building, I/O-loaded, no os_type.
        self.assertEqual(
            ("2", "2", "0", 0, 2),
            (
                stats.get("num_vm_active"),
                stats.get("num_os_type_None"),
                stats.get("io_workload"),
                workload,
                running,
            ),
        )

        self._stop_server(second)
        self._assert_as_nova_writes("stopped")

        # A task nova runs without telling its tracker, and an os_type
        # and project changed in its rows: the periodic sends each change
        # once, and nothing when nothing changed.
        calls = self._recorded("host1")
        instance = objects.Instance.get_by_uuid(self.ctxt, first["id"])
        instance.task_state = "image_snapshot"
        instance.os_type = "linux"
        instance.save()
        self._assert_as_nova_writes("snapshot under way")
        self.assertEqual(1, calls.count("update_instance"), calls)
        self.assertEqual("1", written(self.ctxt, "host1", "host1")[0]["io_workload"])
        del calls[:]
        self._assert_as_nova_writes("nothing changed")
        self.assertEqual(STEADY, calls)
        instance.task_state = None
        instance.save()

        self._resize_server(first, self.flavors[1]["id"])
        self._assert_as_nova_writes("resize waiting for confirmation")
        self._confirm_resize(first)
        self._assert_as_nova_writes("resize confirmed")

        self._delete_server(second)
        self._assert_as_nova_writes("one deleted")
        self._delete_server(first)
        self._assert_as_nova_writes("all deleted")

    def test_a_move_waiting_for_confirmation_costs_no_call_and_no_info_line(self):
        server = self._boot_and_check_allocations(self.flavors[0], "host1")
        server = self._resize_server(server, self.flavors[1]["id"])
        self.assertEqual("host2", server["OS-EXT-SRV-ATTR:host"])
        # The periodic that learns the move landed (if its caller has not
        # told the agent yet) may step it; the next ones only read.
        self._run_periodics(raise_on_error=True)
        calls = {h: self._recorded(h) for h in self.computes}
        capture = _Capture()
        root = logging.getLogger()
        root.addHandler(capture)
        try:
            for _ in range(3):
                self._run_periodics(raise_on_error=True)
        finally:
            root.removeHandler(capture)
        for host, made in calls.items():
            self.assertEqual(STEADY * 3, made, host)
        mine = [line for line in capture.lines if line.startswith(("rtagent", "nova.compute.re"))]
        self.assertEqual([], mine)
        self._confirm_resize(server)
        self._assert_as_nova_writes("confirmed after three quiet periodics")


class StatesInProcess(_States, integrated_helpers.ProviderUsageBaseTestCase):
    mode = "inprocess"
