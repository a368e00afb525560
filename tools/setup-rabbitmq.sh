#!/usr/bin/env bash
# Install RabbitMQ for the RPC integration tests, the demo and the RPC
# benchmark (rtagent.testing.rabbitmq). Idempotent: a second run only checks.
# Nothing is started here: the Debian package starts no service (no systemd
# on our machines), and every user starts a private broker by PID on a free
# loopback port.
set -euo pipefail

if dpkg-query -W -f='${Status}' rabbitmq-server 2>/dev/null | grep -q "install ok installed"; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-rabbitmq: need root to install rabbitmq-server (or install it first)" >&2
    exit 1
fi
echo "setup-rabbitmq: installing rabbitmq-server"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the maintainer scripts from starting a system broker on
# machines that do have an init system: ours are started privately.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    created_policy=1
fi
cleanup() { if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null
