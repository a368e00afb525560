"""pyproject.toml declares exactly the distributions rtagent imports: every
third-party module imported by the product code (rtagent/, less
rtagent/testing/) comes from a declared dependency and every declared
dependency is imported; what tests and rtagent/testing/ import is declared
too, in the test extra or as a dependency."""

import ast
import os
import re
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Modules of system packages, not of any PyPI distribution: Ceph's bindings
# (Debian's python3-rados and python3-rbd, installed and linked into the
# virtualenv by tools/setup-ceph.sh; imported only with images_type = rbd).
SYSTEM_MODULES = frozenset({"rados", "rbd"})


def normalise(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement):
    return normalise(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0))


def declared():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    runtime = {requirement_name(r) for r in project["dependencies"]}
    test = {requirement_name(r) for r in project["optional-dependencies"]["test"]}
    return runtime, test


def imports(*tops, exclude=()):
    """(path, top-level module name) of every absolute import anywhere under
    ``tops`` (in functions too), paths under ``exclude`` left out."""
    for top in tops:
        for directory, _dirs, files in os.walk(os.path.join(ROOT, top)):
            if any(directory.startswith(os.path.join(ROOT, e)) for e in exclude):
                continue
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(directory, name)
                if any(path.startswith(os.path.join(ROOT, e)) for e in exclude):
                    continue
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        modules = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        modules = [node.module]
                    else:
                        continue
                    for module in modules:
                        yield path, module.split(".")[0]


def imported(*tops, exclude=()):
    """Top-level third-party module names imported anywhere under ``tops``
    (in functions too), mapped to the distributions that provide them."""
    provided = metadata.packages_distributions()
    found = {}
    for path, first in imports(*tops, exclude=exclude):
        if first in sys.stdlib_module_names or first in ("rtagent", "tests", "benchmarks", "tools"):
            continue
        if first in SYSTEM_MODULES:
            continue
        beside = os.path.join(os.path.dirname(path), first)
        if os.path.exists(beside + ".py") or os.path.isdir(beside):
            continue  # a script's module or package beside it (tools/)
        dists = provided.get(first)
        assert dists, f"{path}: no installed distribution provides {first}"
        found.setdefault(normalise(dists[0]), set()).add(os.path.relpath(path, ROOT))
    return found


def test_runtime_dependencies_are_exactly_the_imports():
    runtime, _ = declared()
    # rtagent/nova is the nova extra: tests/nova checks it where nova is.
    used = imported("rtagent", exclude=("rtagent/testing", "rtagent/nova"))
    missing = {d: sorted(p)[:3] for d, p in used.items() if d not in runtime}
    assert not missing, f"imported but not in [project] dependencies: {missing}"
    unused = runtime - set(used)
    assert not unused, f"declared but never imported by rtagent: {sorted(unused)}"


def test_test_imports_are_declared():
    runtime, test = declared()
    # tests/nova, tests/cloud, tests/hypervisor, tools/nova_tests.py,
    # tools/nova_full.py, tools/novatests/, benchmarks/nova_integration.py
    # and benchmarks/hypervisor_audit.py run in .venv-nova, beside nova
    # (stestr, subunit); tests/nova/test_dependencies.py checks tests/cloud
    # and tests/hypervisor.
    used = imported(
        "tests",
        "rtagent/testing",
        "benchmarks",
        "tools",
        exclude=(
            "tests/nova",
            "tests/cloud",
            "tests/hypervisor",
            "tools/nova_tests",
            "tools/novatests",
            "benchmarks/nova_integration",
            "benchmarks/hypervisor_audit",
        ),
    )
    missing = {d: sorted(p)[:3] for d, p in used.items() if d not in runtime | test}
    assert not missing, f"imported by tests or tools but not declared: {missing}"
