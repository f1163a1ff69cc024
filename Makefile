# One-command setup: each target creates .venv when missing and installs the project into it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup system-deps test test-fast lint up chaos soak sim clean

NPM_DIRS := service/dashboard service/docs_ui

$(STAMP): pyproject.toml $(NPM_DIRS:%=%/package.json) $(NPM_DIRS:%=%/package-lock.json)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@# The dashboard's charting library and the /docs, /redoc UIs, from npm at the locked
	@# versions, served locally (no CDN).
	if command -v npm >/dev/null; then for d in $(NPM_DIRS); do \
	    (cd $$d && npm ci --no-audit --no-fund --silent) || exit 1; done; \
	  else echo "npm not found: /dashboard, /docs and /redoc will ask for it" >&2; fi
	touch $(STAMP)

setup: $(STAMP)

## Debian packages some tests drive: Prometheus (dashboard queries) and Chromium (/dashboard).
SYSTEM_STAMP := $(VENV)/.system
$(SYSTEM_STAMP):
	@if command -v prometheus >/dev/null && command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get install -y -qq prometheus chromium >/dev/null 2>&1 || \
	   (apt-get update -qq && apt-get install -y -qq prometheus chromium >/dev/null)); \
	else echo "prometheus/chromium missing and cannot apt-get: their tests will skip" >&2; fi
	@touch $(SYSTEM_STAMP)

system-deps: $(SYSTEM_STAMP)

## mypy's cache per user, shared by every clone (a fresh clone checks in ~0.3 s of CPU
## instead of ~14 s): mypy takes a cached module by its content's hash, whatever its path.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/onlinepredict-mypy
export MYPY_CACHE_DIR

## Run the whole test suite (CI runs exactly this), in TEST_JOBS processes (pytest-xdist;
## each starts its own broker and Redis); the 25 slowest tests are listed at the end.
## --dist loadgroup keeps a module's tests in one process (its module fixtures start once).
TEST_JOBS ?= 2
test: $(STAMP) $(SYSTEM_STAMP)
	$(BIN)/ruff check learners service clients tests benchmarks examples deploy
	$(BIN)/mypy learners service clients
	$(BIN)/python -m pytest -q --durations=25 -n $(TEST_JOBS) --dist loadgroup

## Learners only: no broker, no Redis.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q tests/learners learners

lint: $(STAMP)
	$(BIN)/ruff check learners service clients tests benchmarks examples deploy
	$(BIN)/mypy learners service clients

## Set up and run the demo on the embedded stack (broker + Redis + API + workers).
up: $(STAMP)
	$(BIN)/onlinepredict up --demo

## Chaos suite, full size: 100,000 events under repeated faults, fuzzing, corrupt state;
## prints the fault table (make test runs the short version).
chaos: $(STAMP)
	OP_CHAOS_FULL=1 $(BIN)/python -m pytest -q -s tests/chaos

## Deterministic simulation of the worker (docs/reliability.md): seeds 0..SEEDS-1, or one
## SEED (shrunk to a minimal fault schedule when it fails); SIM_JOBS processes.
SEEDS ?= 1000
SIM_JOBS ?= 2
sim: $(STAMP)
	$(BIN)/python -m tests.sim $(if $(SEED),--seed $(SEED),--seeds $(SEEDS) --jobs $(SIM_JOBS)) $(SIM_FLAGS)

## Soak (not in CI): 10 min at 80% of the measured max event rate with predict traffic.
soak: $(STAMP)
	$(BIN)/python benchmarks/soak.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
