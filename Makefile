# loopwright developer tasks. Needs Python 3.9+, Node.js/npm and git.
#
# The development virtualenv and the pinned Claude Code CLI live under
# ~/.cache (not in this checkout), so a checkout stays small enough to add as a
# plugin marketplace directly (`claude plugin marketplace add .` copies it whole).
PYTHON ?= python3
CACHE  ?= $(HOME)/.cache/loopwright
REQS   := $(shell cat requirements.txt requirements-dev.txt | sha1sum | cut -c1-12)
VENV   ?= $(CACHE)/venv-$(REQS)
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.loopwright-installed

.PHONY: setup lint test unit e2e demo fleet-demo bench bench-fleet validate clean

setup: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	touch $(STAMP)

# ruff's lint and its format check (line length and rules in pyproject.toml).
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Workers the suite runs on (pytest-xdist; tests/scheduling.py starts the long tests first).
# Most tests wait on processes (the Claude Code CLI, workers, PostgreSQL), so more workers
# than cores pay: see docs/development.md for the figures. TEST_JOBS=0 runs it in one process.
# One test at a time to a worker as it frees up: in xdist's default chunks of a quarter of the
# suite, the first worker would get every long test. (Not --dist loadgroup: with pytest 9 its
# xdist_group marks group nothing.)
TEST_JOBS ?= 4
XDIST   = -n $(TEST_JOBS) --maxschedchunk 1

# The whole suite: lint, then unit, property, concurrency, fault and real-CLI end-to-end tests.
test: lint
	$(PY) tests/claude_cli.py install
	$(PY) -m pytest -q $(XDIST)

unit: setup
	$(PY) -m pytest -q $(XDIST) -m "not e2e"

e2e: setup
	$(PY) tests/claude_cli.py install
	$(PY) -m pytest -q $(XDIST) -m e2e

# A complete 3-iteration loop through the real Claude Code CLI with a scripted offline model.
demo: setup
	$(PY) tests/claude_cli.py install
	$(PY) tests/demo.py

# Two workers on a throwaway PostgreSQL share three loops; one is killed and its loop fails over.
fleet-demo: setup
	$(PY) tests/claude_cli.py install
	$(PY) tests/fleet_demo.py

bench: setup
	$(PY) bench/bench_stop.py --check --fetch-ralph
	$(PY) bench/bench_tasks.py --check

# Claims per second on a throwaway PostgreSQL (1, 8, 64 workers) beside a bare SKIP LOCKED loop,
# and the server's load under 1,000 running loops; 10,000 running loops on 100 workers with
# 10,000 queued (the server under 25% of one core); a /metrics scrape with 10,000 loops. Needs
# PostgreSQL's server programs.
bench-fleet: setup
	$(PY) bench/bench_fleet.py --check
	$(PY) bench/bench_fleet_scale.py --check
	$(PY) bench/bench_metrics.py --check

validate: setup
	$(PY) tests/claude_cli.py validate .
	$(PY) tests/claude_cli.py validate .claude-plugin/plugin.json

clean:
	rm -rf $(VENV) .venv tests/.cache .pytest_cache .hypothesis
