# Two entry points: `make run` (corral on the embedded default) and `make test` (the whole suite).
# Each creates its own virtualenv in .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/corral run $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy src tests bench
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy src tests bench

bench: $(STAMP)
	$(BIN)/python bench/submit_throughput.py
	$(BIN)/python bench/placement.py
	$(BIN)/python bench/simulate.py

clean:
	rm -rf $(VENV) build src/*.egg-info
