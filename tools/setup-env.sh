#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine for rtagent: the system packages that
# libvirt-python compiles against, then a virtualenv at .venv with the project
# and its test extras. Idempotent: a second run only checks.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${RTAGENT_VENV:-$top/.venv}
python=${PYTHON:-python3}

# libvirt-python compiles against libvirt's headers (no wheel exists).
want=(libvirt-dev pkg-config gcc)
# tests/functional/test_systemd_unit.py checks etc/systemd/rtagent.service
# with systemd-analyze verify (a container image may lack systemd).
command -v systemd-analyze >/dev/null 2>&1 || want+=(systemd)
# A Debian python3 needs these for venv and for compiling; a pyenv or
# python.org build (as on our CI machines) already has both.
"$python" -c "import ensurepip" 2>/dev/null || want+=(python3-venv)
"$python" -c "import os, sysconfig; p = sysconfig.get_paths()['include']; \
assert os.path.exists(os.path.join(p, 'Python.h'))" 2>/dev/null || want+=(python3-dev)

need_apt=()
for pkg in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing system packages: ${need_apt[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: need root to install ${need_apt[*]} (or install them first)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# A real libvirtd + QEMU for tests/integration (make test runs them).
"$top/tools/setup-libvirtd.sh"
"$top/tools/setup-rabbitmq.sh"  # a private broker for the RPC tests, demo and benchmark

stamp=$venv/.rtagent-installed
if [ ! -x "$venv/bin/python" ]; then
    echo "setup: creating virtualenv $venv"
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$top/pyproject.toml" -nt "$stamp" ]; then
    echo "setup: installing rtagent and its test extras into $venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -e "$top[test]"
    touch "$stamp"
fi
"$top/tools/setup-postgres.sh"
# A private Ceph cluster for the RBD tests, its bindings linked into the venv.
RTAGENT_VENV=$venv "$top/tools/setup-ceph.sh"
