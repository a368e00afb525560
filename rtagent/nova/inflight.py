# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Which instances have a claim, move step or release under way through
nova's tracker: the periodic's reconciliation leaves those alone.

The periodic reads nova's rows, then the agent's claims, outside nova's
lock; it releases a claim the rows do not explain, or claims an instance
the agent does not hold, only if no change of it is under way. A change is
marked before the call to the agent and unmarked only after nova's rows
record it, so every claim the periodic sees is either marked or in the rows
it reads next (docs/nova.md, "Claims and the periodic").
"""

import collections
import contextlib
import threading


class InFlight:
    """Instance UUIDs with a change under way (counted: two may overlap)."""

    def __init__(self):
        self._marks = collections.Counter()
        self._mutex = threading.Lock()

    @contextlib.contextmanager
    def mark(self, instance_uuid):
        """``instance_uuid`` is in flight for the ``with`` block."""
        with self._mutex:
            self._marks[instance_uuid] += 1
        try:
            yield
        finally:
            with self._mutex:
                self._marks[instance_uuid] -= 1
                if self._marks[instance_uuid] <= 0:
                    del self._marks[instance_uuid]

    def __contains__(self, instance_uuid):
        with self._mutex:
            return instance_uuid in self._marks
