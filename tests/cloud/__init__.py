"""A real two-host nova cloud on rtagent, driven through nova's REST API
(issue 33; ``make test-cloud``; run in .venv-nova)."""
