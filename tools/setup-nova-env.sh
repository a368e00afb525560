#!/usr/bin/env bash
# A second virtualenv, .venv-nova, for nova's own functional tests with
# rtagent in place (make test-nova): nova 34.0.0 pins much of the OpenStack
# stack, so it does not share .venv. Idempotent; a second run only checks.
#
# Every package is pinned by tools/nova-constraints.txt (what the recorded
# baseline, tools/nova-baseline.json, was measured with; its key holds the
# file's digest). To move a pin: change the file, make nova-baseline.
#
# Two facts of nova's test tree, installed from the wheel:
# - its fixtures turn SQLAlchemy deprecation warnings into errors, and
#   SQLAlchemy 2.1 emits some, so it stays below 2.1 here;
# - its API fixture reads etc/nova/api-paste.ini beside the directory that
#   holds the nova package, while the wheel installs it under <venv>/etc.
#
# make test-cloud runs nova's services on PostgreSQL, through psycopg2. Its
# pin is here, not in the constraints file: nova's suites (make test-nova)
# run on SQLite and never import it, so the recorded baseline still holds.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${RTAGENT_NOVA_VENV:-$top/.venv-nova}
python=${PYTHON:-python3}
constraints=$top/tools/nova-constraints.txt

# libvirt-python (an rtagent dependency) compiles against libvirt-dev, which
# tools/setup-env.sh installs; make test-nova runs that first.
stamp=$venv/.rtagent-nova-installed
if [ ! -x "$venv/bin/python" ]; then
    echo "setup-nova: creating virtualenv $venv"
    "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$top/pyproject.toml" -nt "$stamp" ] || [ "$constraints" -nt "$stamp" ] ||
    [ "$0" -nt "$stamp" ]; then
    echo "setup-nova: installing nova 34.0.0, its test requirements and rtagent[nova] into $venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -c "$constraints" \
        'nova==34.0.0' 'sqlalchemy<2.1' openstack-placement stestr oslotest fixtures \
        testtools testscenarios testresources ddt gabbi wsgi-intercept requests-mock \
        osprofiler python-barbicanclient pytest hypothesis
    "$venv/bin/pip" install -q -c "$constraints" -e "$top[nova]"
    "$venv/bin/pip" install -q 'psycopg2-binary==2.9.13'
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    mkdir -p "$site/etc/nova"
    cp "$venv/etc/nova/api-paste.ini" "$site/etc/nova/api-paste.ini"
    # rtagent.nova.testhook: rtagent's tracker in nova's tests when
    # RTAGENT_NOVA_TRACKER is set; nothing at all otherwise.
    echo "import rtagent.nova.testhook as _h; _h.install_if_requested()" \
        > "$site/rtagent_nova_testhook.pth"
    touch "$stamp"
fi
