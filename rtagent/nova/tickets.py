# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""The claim tickets ComputeManager holds: context managers that abort on an
exception inside their ``with`` block, as nova's own claims do.

They carry what nova's callers read from a claim (``migration``,
``claimed_numa_topology``, ``flavor``, ``image_meta``); the accounting
itself is already done by the agent when a ticket exists.
"""


class Claim:
    """An instance claim (build, unshelve)."""

    migration = None

    def __init__(self, context, instance, nodename, tracker):
        self.context = context
        self.instance = instance
        self.instance_ref = instance
        self.nodename = nodename
        self.tracker = tracker
        self.flavor = instance.flavor
        self.image_meta = None

    @property
    def claimed_numa_topology(self):
        return self.instance.numa_topology

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()

    def abort(self):
        self.tracker.abort_instance_claim(self.context, self.instance, self.nodename)


class MoveClaim(Claim):
    """A move claim at the destination (resize, cold or live migration,
    evacuation); ``instance`` is a clone, as in nova."""

    def __init__(
        self, context, instance, nodename, tracker, *, flavor, image_meta, migration, numa
    ):
        super().__init__(context, instance.obj_clone(), nodename, tracker)
        self.instance_ref = instance
        self.flavor = flavor
        self.image_meta = image_meta
        self.migration = migration
        self._numa = numa

    @property
    def claimed_numa_topology(self):
        return self._numa

    def abort(self):
        self.tracker.drop_move_claim(self.context, self.instance, self.nodename, flavor=self.flavor)
        self.instance.drop_migration_context()
