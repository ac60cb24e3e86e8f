# Patchbay: `make run` to use it, `make test` to test it.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=

.PHONY: install install-dev install-node run test lint format check-compose clean

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit("Patchbay needs Python 3.11 or newer") if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)

$(VENV)/.runtime-installed: requirements.txt | $(PY)
	$(PIP) install -q -r requirements.txt
	@touch $@

$(VENV)/.dev-installed: requirements-dev.txt $(VENV)/.runtime-installed
	$(PIP) install -q -r requirements-dev.txt
	@touch $@

## install: create .venv and install the exact pins of requirements.txt
install: $(VENV)/.runtime-installed

install-dev: $(VENV)/.dev-installed

# Node-based test peers (Node 22, server-everything, the conformance suite), when npm
# is there; the tests that need them skip without them (and fail in CI).
node_modules/.installed: package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: tests that need Node-based MCP peers will be skipped"; fi

install-node: node_modules/.installed

## run: set up on the first run, then start web, worker and beat (Ctrl-C stops all)
run: install
	$(PY) manage.py run --host $(HOST) --port $(PORT)

## test: install the dev requirements and run the whole suite
test: install install-dev install-node
	$(PY) -m pytest $(PYTEST_ARGS)

## lint: the static checks CI runs: ruff, the import contracts and rules, mypy
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(PY) .ci/import_shape.py
	$(VENV)/bin/mypy

format: install-dev
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

check-compose:
	docker-compose -f docker-compose.yml config -q

clean:
	rm -rf $(VENV) .pytest_cache
