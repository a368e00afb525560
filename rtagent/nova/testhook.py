# Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy
# of the License at http://www.apache.org/licenses/LICENSE-2.0
"""Puts :class:`~rtagent.nova.testing.RtagentTrackerFixture` into nova's own
functional tests, unchanged, when ``RTAGENT_NOVA_TRACKER`` names a mode.

nova's test tree cannot be edited (it is nova's, installed from its wheel),
so the test environment made by ``tools/setup-nova-env.sh`` has a ``.pth``
file that calls :func:`install_if_requested` at interpreter start. With the
variable unset (the baseline run) it does nothing at all. With it set, once
nova's modules are imported:

- ``nova.test.TestCase.setUp`` uses the fixture in every functional test,
  before the test starts any service;
- ``nova.tests.functional.fixtures.PlacementFixture`` tells it where the
  test's Placement is.
"""

import importlib.abc
import importlib.machinery
import os
import sys

ENV = "RTAGENT_NOVA_TRACKER"


def install_if_requested():
    mode = os.environ.get(ENV)
    if not mode:
        return
    sys.meta_path.insert(
        0,
        _AfterImport(
            {
                "nova.test": lambda module: _wrap_test_case(module, mode),
                "nova.tests.functional.fixtures": _wrap_placement_fixture,
            }
        ),
    )


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``hooks[name](module)`` right after module ``name`` executes."""

    def __init__(self, hooks):
        self._hooks = dict(hooks)

    def find_spec(self, name, path, target=None):
        hook = self._hooks.pop(name, None)
        if hook is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            hook(module)

        spec.loader.exec_module = exec_module
        return spec


def _wrap_test_case(module, mode):
    test_case = module.TestCase
    set_up = test_case.setUp

    def setUp(self, *args, **kwargs):
        set_up(self, *args, **kwargs)
        if type(self).__module__.startswith("nova.tests.functional"):
            from rtagent.nova.testing import RtagentTrackerFixture

            self.useFixture(RtagentTrackerFixture(mode, test_id=self.id()))

    # What tools/nova_tests.py looks for before a run: the hook is in place.
    setUp.rtagent_mode = mode
    test_case.setUp = setUp


def _wrap_placement_fixture(module):
    fixture = module.PlacementFixture
    set_up = fixture.setUp

    def setUp(self, *args, **kwargs):
        set_up(self, *args, **kwargs)
        from rtagent.nova.testing import placement_started

        placement_started(self.endpoint)

    fixture.setUp = setUp
