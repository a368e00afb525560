"""The package as pip builds and installs it: ``python -m build`` makes the
sdist from this checkout and the wheel from that sdist (setuptools from
``[build-system]``, in an isolated environment), the sdist carries tests,
docs and etc/, and the wheel installed into a new virtualenv runs
``rtagent --version`` and the config generator.

The new virtualenv gets only the wheel; its dependencies come from this
checkout's virtualenv through a ``.pth`` line (installing them from the
index would take minutes: libvirt-python compiles). ``pip check`` then
proves every requirement the wheel declares is met there, and
tests/unit/test_dependencies.py that the declared ones are those imported.
"""

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from importlib import metadata

import pytest

from tests.functional.conftest import ROOT
from tests.requirements import require
from tests.unit.test_dependencies import imports

# python -m build writes rtagent.egg-info and a staging directory into the
# checkout, so the module's builds must not run side by side: make test's
# workers take whole files (--dist loadfile).
pytestmark = pytest.mark.functional
try:
    import build  # noqa: F401 - python -m build runs it
except ImportError:
    require(
        "python -m build is not installed (the test extra has it)",
        "packaging",
        allow_module_level=True,
    )

VERSION = metadata.version("rtagent")


def run(*args, cwd, timeout=300):
    result = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", str(out), ROOT, cwd=out)
    sdist = out / f"rtagent-{VERSION}.tar.gz"
    wheel = out / f"rtagent-{VERSION}-py3-none-any.whl"
    assert sdist.is_file() and wheel.is_file(), sorted(os.listdir(out))
    return sdist, wheel


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory):
    """A new virtualenv with the wheel (not this checkout) installed."""
    _, wheel = dist
    home = tmp_path_factory.mktemp("venv")
    env = home / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", str(env), cwd=home)
    python = str(env / "bin" / "python")
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
        str(wheel), cwd=home)  # fmt: skip
    purelib = run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=home
    ).stdout.strip()
    with open(os.path.join(purelib, "rtagent-test-deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    return env, home


def test_the_sdist_carries_tests_docs_and_etc(dist):
    sdist, _ = dist
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for path in (
        "tests/functional/test_packaging.py",
        "tests/unit/test_dependencies.py",
        "docs/operations.md",
        "docs/cli.md",
        "etc/rtagent/rtagent.conf.sample",
        "etc/rtagent/rtagent-config-generator.conf",
        "etc/rtagent/demo-host.xml",
        "etc/systemd/rtagent.service",
        "tools/setup-env.sh",
        "Makefile",
        "LICENSE",
    ):
        assert path in names, path


def test_the_wheel_declares_pyyaml_and_tenacity_not_retrying(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as whl:
        meta = whl.read(f"rtagent-{VERSION}.dist-info/METADATA").decode()
        names = set(whl.namelist())
    requires = [
        line.split(":", 1)[1].strip()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    runtime = [r for r in requires if "extra ==" not in r]
    assert "PyYAML>=6.0" in runtime
    # tenacity is the one retry library; retrying, unmaintained, is not used.
    assert any(r.lower().startswith("tenacity>=") for r in runtime), runtime
    assert not any(r.lower().startswith("retrying") for r in requires)
    data = f"rtagent-{VERSION}.data/data/"
    assert data + "share/doc/rtagent/operations.md" in names
    assert data + "share/rtagent/rtagent.service" in names
    # The installed docs link to one another: every page they name is there.
    docs = data + "share/doc/rtagent/"
    with zipfile.ZipFile(wheel) as whl:
        for name in sorted(n for n in names if n.startswith(docs) and n.endswith(".md")):
            text = whl.read(name).decode()
            for page in set(re.findall(r"(?:\]\(|`)(?:docs/)?([a-z-]+\.md)", text)):
                assert docs + page in names, f"{name} links to {page}, not installed"


def test_no_module_imports_retrying():
    """The retries are tenacity's (rtagent.placement.retry); nothing in
    rtagent/ imports retrying, which nova's extra still installs."""
    found = [path for path, module in imports("rtagent") if module == "retrying"]
    assert found == []


def test_the_installed_wheel_runs_version_and_the_config_generator(venv):
    env, home = venv
    bindir = env / "bin"
    # From the wheel, not from this checkout (the cwd is elsewhere).
    where = run(str(bindir / "python"), "-c", "import rtagent; print(rtagent.__file__)", cwd=home)
    assert where.stdout.startswith(str(env)), where.stdout
    version = run(str(bindir / "rtagent"), "--version", cwd=home)
    assert version.stdout.strip() == VERSION
    sample = run(
        str(bindir / "python"), "-m", "oslo_config.generator", "--namespace", "rtagent", cwd=home
    ).stdout
    for line in ("[placement]", "[libvirt]", "#reserved_host_memory_mb = 512"):
        assert line in sample, line
    check = run(sys.executable, "-m", "pip", "--python", str(bindir / "python"), "check", cwd=home)
    assert "No broken requirements found" in check.stdout
