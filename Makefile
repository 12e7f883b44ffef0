# Two commands do all the set-up on a fresh machine with Python 3.11 and pip:
#   make sweep   creates .venv and runs the demo sweep on the embedded simulated node
#   make test    creates .venv and runs ruff, mypy and the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: sweep test lint typecheck unit e2e venv report mlflow-ui optuna-dashboard bench bench-full clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

sweep: $(STAMP)
	$(BIN)/python -m orchestrator.sweep $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check orchestrator tests benchmarks tools
	$(BIN)/ruff format --check orchestrator tests benchmarks tools

typecheck: $(STAMP)
	$(BIN)/mypy

# The fast loop while changing code: everything but the end-to-end sweeps of tests/e2e (which start Ray
# clusters and take most of the suite's time) and the few other tests marked `slow`. `make test`, what CI
# runs, runs them all: every test outside tests/e2e, slow ones too, then the end-to-end sweeps.
UNIT = $(BIN)/python -m pytest -q -rs --ignore=tests/e2e

unit: $(STAMP)
	$(UNIT) -m "not slow" $(PYTEST_ARGS)

e2e: $(STAMP)
	$(BIN)/python -m pytest -q -rs tests/e2e $(PYTEST_ARGS)

test: lint typecheck
	$(UNIT) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -rs tests/e2e $(PYTEST_ARGS)

report: $(STAMP)
	$(BIN)/python -m orchestrator.report $(STUDY)

# Both bind to 127.0.0.1 only (reach them from elsewhere through an SSH tunnel); PORT=N picks the port.
mlflow-ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///runs/mlflow.db --host 127.0.0.1 --port $(or $(PORT),5000)

optuna-dashboard: $(STAMP)
	$(BIN)/optuna-dashboard sqlite:///runs/optuna.db --host 127.0.0.1 --port $(or $(PORT),8080)

# A reduced run in minutes (writes only under benchmarks/out/); bench-full is the run RESULTS.md holds.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run --quick $(ARGS)

bench-full: $(STAMP)
	$(BIN)/python -m benchmarks.run $(ARGS)

clean:
	rm -rf runs .mypy_cache .ruff_cache .pytest_cache
