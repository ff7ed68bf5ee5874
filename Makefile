# Deskpool: `make demo` starts the portal with a demo pool; `make test` runs the suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# The suite runs against the real PostgreSQL and Redis; unset, these are the local ones.
TEST_DATABASE_URL := $(or $(DATABASE_URL),postgres://postgres@127.0.0.1:5432/deskpool)
TEST_REDIS_URL := $(or $(REDIS_URL),redis://127.0.0.1:6379/8)

.PHONY: demo test images venv lint clean

$(VENV)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "Deskpool needs $(PYTHON) (Python 3.11) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed-dev

demo: $(VENV)/.installed
	$(PY) -m bench.demo

images:
	bash nodeagent/images/build.sh all

test: venv
	@mkdir -p test-output/screenshots
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

clean:
	rm -rf var test-output
