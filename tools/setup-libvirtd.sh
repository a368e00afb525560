#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine for the integration tests that run a real
# libvirtd + QEMU (tests/integration, rtagent.testing.libvirtd). Idempotent:
# a second run only checks. Needs root. Nothing is started here; the tests
# start and stop their own daemons by PID.
set -euo pipefail

want=(libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86 qemu-utils)
need_apt=()
for pkg in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ] || [ ! -f /etc/libvirt/qemu.conf ] \
    || ! getent passwd libvirt-qemu >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-libvirtd: need root (packages: ${need_apt[*]:-none missing})" >&2
        exit 1
    fi
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup-libvirtd: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# libvirtd needs the account even when QEMU runs as root.
getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu
getent passwd libvirt-qemu >/dev/null \
    || useradd -r -g libvirt-qemu -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu

# QEMU as root: /dev/kvm is root-only on these machines. As libvirt-qemu,
# libvirt finds KVM unusable for the guest user, throws its QEMU capability
# cache away on every domain start and re-probes (45 s per start here).
# Written only when the file does not exist: an operator's file is left alone.
if [ ! -f /etc/libvirt/qemu.conf ]; then
    mkdir -p /etc/libvirt
    printf '# Written by rtagent tools/setup-libvirtd.sh\nuser = "root"\ngroup = "root"\n' \
        > /etc/libvirt/qemu.conf
    echo "setup-libvirtd: wrote /etc/libvirt/qemu.conf (QEMU runs as root)"
fi
mkdir -p /var/log/libvirt/qemu
