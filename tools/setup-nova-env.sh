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
#   holds the nova package, while the wheel installs it under <venv>/etc;
# - its api_sample_tests and notification sample tests read the samples of
#   nova's documentation, doc/api_samples and doc/notification_samples,
#   beside that directory too (nova/tests/functional/api_samples_test_base.py
#   and notification_sample_tests/notification_sample_base.py go three and
#   four directories up from their own), and the wheel has no doc/ at all:
#   they come from nova's source distribution of the same version, checked
#   against its digest (make test-nova-full runs them; docs/nova-harness.md).
#
# make test-cloud runs nova's services on PostgreSQL, through psycopg2. Its
# pin is here, not in the constraints file: nova's suites (make test-nova)
# run on SQLite and never import it, so the recorded baseline still holds.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
venv=${RTAGENT_NOVA_VENV:-$top/.venv-nova}
python=${PYTHON:-python3}
constraints=$top/tools/nova-constraints.txt
# nova 34.0.0's source distribution on PyPI (nova-34.0.0.tar.gz).
nova_sdist_sha256=919eef77cda4ce0cc4746a5853b5d9341ebd0ae37bc8b1939eb77d17727c00df

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

# The documentation samples, apart from the install above so that an
# environment built before them gets them without reinstalling. The stamp
# holds the digest of the source distribution they came from.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
samples_stamp=$site/doc/.rtagent-nova-samples
if [ "$(cat "$samples_stamp" 2>/dev/null)" != "$nova_sdist_sha256" ]; then
    echo "setup-nova: placing nova 34.0.0's doc/api_samples and doc/notification_samples from its source distribution"
    download=$(mktemp -d)
    trap 'rm -rf "$download"' EXIT
    "$venv/bin/pip" download -q --no-binary :all: --no-deps -d "$download" 'nova==34.0.0'
    sdist=$download/nova-34.0.0.tar.gz
    if ! echo "$nova_sdist_sha256  $sdist" | sha256sum -c --quiet -; then
        echo "setup-nova: $sdist is not nova 34.0.0's source distribution (sha256 differs)" >&2
        exit 1
    fi
    rm -rf "$site/doc/api_samples" "$site/doc/notification_samples"
    mkdir -p "$site/doc"
    tar -xzf "$sdist" -C "$site/doc" --strip-components=2 \
        nova-34.0.0/doc/api_samples nova-34.0.0/doc/notification_samples
    echo "$nova_sdist_sha256" > "$samples_stamp"
fi

# The Ceph Python bindings: nova's RBD image backend (make test-hypervisor's
# guest on RBD) and the embedded agent's pool reading (tests/nova) import
# them. tools/setup-env.sh installed Debian's packages; this links them.
RTAGENT_VENV=$venv "$top/tools/setup-ceph.sh"
