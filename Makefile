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

# Runs every benchmarks/*.py; each prints key=value lines, the last a summary,
# and exits non-zero on a miss or a void measurement. All run; the target
# fails if any did, and names them.
bench: venv
	@failed=""; for script in benchmarks/*.py; do \
	    [ -e "$$script" ] || continue; \
	    echo "== $$script"; $(PY) "$$script" || failed="$$failed $$script"; \
	done; \
	if [ -n "$$failed" ]; then echo "bench: MISS or VOID in:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
