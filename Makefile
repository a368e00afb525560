# rtagent developer entry points. Every target prepares .venv first, so each
# works on a fresh Debian 12 machine (apt and pip need network to registries).

VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: all venv demo test unit functional lint format genconfig check-genconfig bench clean

all: test

venv:
	@tools/setup-env.sh

demo: venv
	$(PY) tools/demo.py

test: venv
	$(PY) -m pytest -q $(PYTEST_ARGS) tests

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

# Runs every benchmarks/*.py; each prints key=value lines, the last a summary.
bench: venv
	@set -e; found=0; for script in benchmarks/*.py; do \
	    [ -e "$$script" ] || continue; found=1; \
	    echo "== $$script"; $(PY) "$$script"; \
	done; [ $$found -eq 1 ] || echo "no benchmarks yet (benchmarks/*.py)"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
