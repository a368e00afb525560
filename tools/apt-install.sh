#!/usr/bin/env bash
# Install Debian packages whose maintainer scripts would start system
# services (RabbitMQ, Ceph) without letting them: ours are started
# privately, by PID. Needs root.
# Usage: tools/apt-install.sh WHO PACKAGE...   (WHO names the caller in messages)
set -euo pipefail

who=$1
shift
if [ "$(id -u)" -ne 0 ]; then
    echo "$who: need root to install $* (or install them first)" >&2
    exit 1
fi
echo "$who: installing $*"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the maintainer scripts from starting the services on
# machines that do have an init system.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
