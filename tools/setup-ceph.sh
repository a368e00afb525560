#!/usr/bin/env bash
# Install Debian's Ceph (monitor, manager, OSD, CLI), its Python bindings
# and QEMU's rbd block driver (qemu-block-extra: a real guest's disk as an
# RBD image, make test-hypervisor) for the RBD tests (rtagent.testing.ceph
# starts a private single-node cluster by PID on loopback), then make the
# bindings importable from the virtualenv (RTAGENT_VENV; setup-nova-env.sh
# runs it again for .venv-nova, whose nova reads the pool through them).
# Idempotent: a second run only checks. Nothing is started here.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${RTAGENT_VENV:-$top/.venv}
want=(ceph-mon ceph-mgr ceph-osd ceph-common python3-rados python3-rbd qemu-block-extra)
need=()
for pkg in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    "$top/tools/apt-install.sh" setup-ceph "${need[@]}"
fi

# Debian builds the bindings for its own /usr/bin/python3 (3.11 on Debian
# 12); a virtualenv made from another 3.11 (pyenv, as on CI) reaches them
# through links in its site-packages. Another minor version cannot load them.
[ -x "$venv/bin/python" ] || exit 0
site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
for mod in rados rbd; do
    "$venv/bin/python" -c "import $mod" 2>/dev/null && continue
    for so in /usr/lib/python3/dist-packages/"$mod".cpython-*.so; do
        [ -e "$so" ] || continue
        ln -sf "$so" "$site/$(basename "$so")"
    done
done
