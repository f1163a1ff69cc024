# One-command setup: each target creates .venv when missing and installs the project into it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast lint up chaos soak clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

## Run the whole test suite (CI runs exactly this).
test: $(STAMP)
	$(BIN)/python -m pytest -q

## Learners only: no broker, no Redis.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/learners learners

lint: $(STAMP)
	$(BIN)/ruff check learners service clients tests benchmarks
	$(BIN)/mypy learners

## Set up and run the demo on the embedded stack (broker + Redis + API + workers).
up: $(STAMP)
	$(BIN)/onlinepredict up --demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
