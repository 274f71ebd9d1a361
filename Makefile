# loopwright developer tasks. Needs Python 3.9+, Node.js/npm and git.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.loopwright-installed

.PHONY: setup test unit e2e demo bench validate clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[test]'
	touch $(STAMP)

# The whole suite: unit, property, concurrency, fault and real-CLI end-to-end tests.
test: setup
	$(PY) tests/claude_cli.py install
	$(PY) -m pytest -q

unit: setup
	$(PY) -m pytest -q -m "not e2e"

e2e: setup
	$(PY) tests/claude_cli.py install
	$(PY) -m pytest -q -m e2e

# A complete 3-iteration loop through the real Claude Code CLI with a scripted offline model.
demo: setup
	$(PY) tests/claude_cli.py install
	$(PY) tests/demo.py

bench: setup
	$(PY) bench/bench_stop.py

validate: setup
	$(PY) tests/claude_cli.py validate .

clean:
	rm -rf $(VENV) tests/.cache .pytest_cache
