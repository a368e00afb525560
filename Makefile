# rtagent developer entry points. Every target prepares .venv first, so each
# works on a fresh Debian 12 machine (apt and pip need network to registries).

VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# make test's pytest workers (pytest-xdist), each taking whole files; 0 runs
# them in this process. The tests of the real libvirtd run after, in one.
TEST_WORKERS ?= 2

NOVA_VENV ?= .venv-nova

.PHONY: all venv nova-venv demo test test-nova test-nova-integration test-nova-suites test-nova-full test-nova-full-summary test-cloud test-cloud-faults test-hypervisor nova-baseline unit functional lint format genconfig check-genconfig bench bench-fleet soak clean

all: test

venv:
	@tools/setup-env.sh

demo: venv
	$(PY) tools/demo.py

test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not real_libvirtd" $(PYTEST_ARGS) --ignore=tests/nova --ignore=tests/cloud --ignore=tests/hypervisor --ignore=tests/faults tests
	$(PY) -m pytest -q -m real_libvirtd $(PYTEST_ARGS) --ignore=tests/nova --ignore=tests/cloud --ignore=tests/hypervisor --ignore=tests/faults tests

# nova 34.0.0's own functional tests with rtagent as the resource tracker
# (tools/nova_tests.py; docs/nova-harness.md), in their own virtualenv, after the
# tests of the integration itself.
nova-venv: venv
	@RTAGENT_NOVA_VENV=$(NOVA_VENV) tools/setup-nova-env.sh

test-nova: test-nova-integration test-nova-suites

# The two halves of make test-nova: the integration's own tests (tests/nova)
# and nova's suites with rtagent (tools/nova_tests.py).
test-nova-integration: nova-venv
	$(NOVA_VENV)/bin/python -m pytest -q $(PYTEST_ARGS) tests/nova

test-nova-suites: nova-venv
	$(NOVA_VENV)/bin/python tools/nova_tests.py

# Every test of nova's functional tree, stock and with rtagent, one part at
# a time (PART=k/n; the record is kept in 8 parts), each part's result kept
# in tools/nova-full/ with the commit it ran at (tools/nova_full.py;
# docs/nova-harness.md, "The whole-tree record"). Not part of CI: hours on 2 cores.
test-nova-full: nova-venv
	@[ -n "$(PART)" ] || { echo "make test-nova-full needs PART=k/n, e.g. PART=1/8"; exit 2; }
	$(NOVA_VENV)/bin/python tools/nova_full.py run --part $(PART) $(NOVA_FULL_ARGS)

# The whole tree's figures from the kept parts alone (no nova environment).
test-nova-full-summary:
	@python3 tools/nova_full.py summary

# A real two-host nova cloud on rtagent, driven through nova's REST API
# (tests/cloud, issue 33): RabbitMQ, Placement, PostgreSQL, nova-api,
# nova-conductor, nova-scheduler and per host `rtagent run` beside
# rtagent-nova-compute, every one a process started and stopped by PID;
# step figures at the end.
test-cloud: nova-venv
	$(NOVA_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests/cloud

# The same cloud under faults, once on rtagent and once on stock
# nova-compute (issue 50, tests/faults; docs/faults.md): a tracker or
# compute service killed mid-boot, mid-resize, mid-live-migration,
# RabbitMQ, Placement and PostgreSQL restarted under load; per fault and
# tracker a line of figures, then faults_rtagent_clean=K/N
# faults_nova_clean=K/N.
test-cloud-faults: nova-venv
	$(NOVA_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests/faults

# nova's real libvirt driver on a real hypervisor beside rtagent (issue 47,
# tests/hypervisor): one host of the test cloud whose private libvirtd starts
# real QEMU guests (KVM where /dev/kvm exists), driven through nova's REST
# API; each step's agreement printed, then
# hypervisor_steps=N hypervisor_agree=N virt_type=kvm|qemu. It takes the
# machine's one real libvirtd in turn with make test's (a machine lock).
test-hypervisor: nova-venv
	$(NOVA_VENV)/bin/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS) tests/hypervisor

# Stock nova's results for the suites make test-nova selects, recorded in
# tools/nova-baseline.json (about 25 minutes); needed again when nova, Python,
# tools/nova-constraints.txt or the selection change (make test-nova says so).
nova-baseline: nova-venv
	$(NOVA_VENV)/bin/python tools/nova_tests.py record

unit: venv
	$(PY) -m pytest -q $(PYTEST_ARGS) tests/unit

functional: venv
	$(PY) -m pytest -q $(PYTEST_ARGS) tests/functional

lint: venv
	$(VENV)/bin/ruff check rtagent tests tools benchmarks
	$(VENV)/bin/ruff format --check rtagent tests tools benchmarks

format: venv
	$(VENV)/bin/ruff format rtagent tests tools benchmarks

genconfig: venv
	$(VENV)/bin/oslo-config-generator --config-file etc/rtagent/rtagent-config-generator.conf

# Fails when etc/rtagent/rtagent.conf.sample is not what the code generates.
check-genconfig: venv
	@tmp=$$(mktemp) && trap 'rm -f $$tmp' EXIT && \
	$(VENV)/bin/oslo-config-generator \
	    --config-file etc/rtagent/rtagent-config-generator.conf --output-file $$tmp && \
	diff -u etc/rtagent/rtagent.conf.sample $$tmp && echo "sample config is current"

# Runs every benchmarks/*.py but fleet.py and soak.py; each prints key=value lines, the
# last a summary, and exits non-zero on a miss or a void measurement. All
# run; the target fails if any did, and names them.
bench: venv nova-venv
	@failed=""; for script in benchmarks/*.py; do \
	    [ -e "$$script" ] || continue; \
	    [ "$$script" = benchmarks/fleet.py ] && continue; \
	    [ "$$script" = benchmarks/soak.py ] && continue; \
	    echo "== $$script"; $(PY) "$$script" || failed="$$failed $$script"; \
	done; \
	if [ -n "$$failed" ]; then echo "bench: MISS or VOID in:$$failed"; exit 1; fi

# K agents on one Placement (gunicorn workers over PostgreSQL): steady load,
# an outage, a herd restart (benchmarks/README.md). Minutes, not in CI nor in
# `make bench`: make bench-fleet K=200 FLEET_ARGS="--refresh-interval 0".
K ?= 50
FLEET_ARGS ?=
bench-fleet: venv
	$(PY) benchmarks/fleet.py --k $(K) $(FLEET_ARGS)

# The crash-loop soak: the agent SIGKILLed ROUNDS times with claims and moves
# in flight, its state and Placement checked after each restart
# (benchmarks/soak.py; 4 to 5 minutes at 500 rounds on 2 cores). Not in CI
# nor in `make bench`: make soak ROUNDS=50 SOAK_ARGS="--seed 7".
ROUNDS ?= 500
SOAK_ARGS ?=
soak: venv
	$(PY) benchmarks/soak.py --rounds $(ROUNDS) $(SOAK_ARGS)

clean:
	rm -rf $(VENV) $(NOVA_VENV) .nova-tests .pytest_cache .ruff_cache *.egg-info
