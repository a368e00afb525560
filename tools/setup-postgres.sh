#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine for the PostgreSQL-backed Placement tests
# (tests/integration/test_placement_pg.py, rtagent.testing.postgres): the
# postgresql packages (psycopg2 comes with the project's test extras).
# Idempotent. Nothing is started here (Debian's own cluster is not used); the
# tests start and stop a private server by PID.
set -euo pipefail

if [ ! -x /usr/lib/postgresql/15/bin/initdb ]; then
    "$(dirname "$0")/apt-install.sh" setup-postgres postgresql
fi

# The driver Placement uses for PostgreSQL (psycopg2-binary) is a test extra
# in pyproject.toml, installed with the project.
