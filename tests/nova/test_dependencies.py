"""rtagent/nova imports only rtagent's dependencies, those of its ``nova``
extra, and what nova itself requires."""

import os
import re
from importlib import metadata

import pytest
import tomllib

from tests.unit.test_dependencies import ROOT, declared, imported, normalise, requirement_name


def test_the_nova_extra_imports_only_nova_and_declared_dependencies():
    runtime, _ = declared()
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["nova"]
    runtime |= {requirement_name(r) for r in extra}
    nova_needs = {
        normalise(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in metadata.requires("nova")
    }
    used = imported("rtagent/nova")
    stray = {d: sorted(p)[:3] for d, p in used.items() if d not in runtime | nova_needs | {"nova"}}
    assert not stray, f"rtagent/nova imports what neither rtagent nor nova requires: {stray}"
    assert "nova" in used


@pytest.mark.parametrize("tree", ["tests/cloud", "tests/hypervisor"])
def test_what_runs_beside_nova_imports_only_nova_and_declared_dependencies(tree):
    """tests/cloud (make test-cloud) and tests/hypervisor (make
    test-hypervisor) run in .venv-nova: nova, what nova requires, rtagent's
    declared dependencies and its test ones."""
    runtime, test = declared()
    nova_needs = {
        normalise(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in metadata.requires("nova")
    }
    used = imported(tree)
    stray = {
        d: sorted(p)[:3] for d, p in used.items() if d not in runtime | test | nova_needs | {"nova"}
    }
    assert not stray, f"{tree} imports what neither rtagent nor nova requires: {stray}"
