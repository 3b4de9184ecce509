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

# An editable install leaves corral's own modules uncompiled, and with PYTHONDONTWRITEBYTECODE set
# (as on CI's machines) every `corral` process would compile them again: 0.2 s of each CLI call and
# 0.5 s of each `corral run` start on a 2-CPU host, and the tests start corral a few thousand times.
# compileall writes the bytecode whatever that variable says, and rewrites only what changed.
COMPILE := $(BIN)/python -m compileall -q src

run: $(STAMP)
	$(COMPILE)
	$(BIN)/corral run $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy src tests bench
	$(COMPILE)
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
