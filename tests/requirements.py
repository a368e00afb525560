"""One rule for tests that need a service or a tool this machine may lack.

Where it is missing the test is skipped, except on CI (``CI`` set to 1, true
or yes; ``.ci/run`` sets it): CI installs everything the tests need, so a
skip there would hide a broken install, and the run fails instead.
"""

import os

import pytest


def on_ci():
    """True when running on CI (``CI`` is 1, true or yes)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(missing, what, allow_module_level=False):
    """Skip (fail on CI) when ``missing``, a reason or None, is set.

    :param what: what cannot run, for the message.
    """
    if not missing:
        return
    if on_ci():
        pytest.fail(f"CI must run the {what} tests: {missing}", pytrace=False)
    pytest.skip(f"{what} unavailable: {missing}", allow_module_level=allow_module_level)
