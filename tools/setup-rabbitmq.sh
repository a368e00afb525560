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
"$(dirname "$0")/apt-install.sh" setup-rabbitmq rabbitmq-server
