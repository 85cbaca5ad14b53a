# Everything a new machine needs: `make run` (install + the embedded default job) and
# `make test` (install + lint + type check + tests). The virtual environment lives in .venv.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install run test test-full lint typecheck docs reference format bench bench-gpu reproduce clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

run: install
	$(BIN)/gradsync run

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# Settings in pyproject.toml ([tool.mypy]); its cache, .mypy_cache, makes a re-run take seconds.
typecheck: install
	$(BIN)/python -m mypy

# The documentation site (Sphinx + MyST, docs/conf.py) into build/docs; any warning (a broken
# link or anchor, a page in no table of contents) fails it.
docs: install
	$(BIN)/sphinx-build -W --keep-going -q -b html docs build/docs

# docs/reference/config.md from the schemas and YAML files (docs and a test fail while stale).
reference: install
	$(BIN)/python -m gradsync.jobs.reference docs

# The unit tests run in this process and are CPU-bound: UNIT_PROCS of them at a time
# (pytest-xdist). The other tests start and time worker processes of their own: one at a time.
UNIT_PROCS ?= 2
PYTEST_SPLIT = $(BIN)/python -m pytest -n $(UNIT_PROCS) tests/unit $(1) && \
	$(BIN)/python -m pytest --ignore=tests/unit $(1)

test: lint typecheck docs
	$(call PYTEST_SPLIT,)

test-full: lint typecheck docs
	$(call PYTEST_SPLIT,-m "")

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	$(BIN)/python -m benchmarks.allreduce_vs_ddp --write
	$(BIN)/python -m benchmarks.step_overhead --write
	$(BIN)/python -m benchmarks.sparsifiers --write
	$(BIN)/python -m benchmarks.quantizers --write

# On a machine with a CUDA GPU, in at most 8 minutes: the plain PyTorch limits, schedulers x
# compressors, the compression kernels and `pytest -m gpu`; writes BENCHMARKS.md's "On one GPU"
# section and keeps its log, the tests' JUnit XML and the tables' rows in benchmarks/results/gpu/.
# GPU_OPTIONS go to the command (e.g. GPU_OPTIONS="--minutes 20", "--tests-only"). No install
# step: where there is no .venv (a GPU machine whose python has torch and the other
# dependencies on PYTHONPATH) it runs with $(PYTHON).
GPU_OPTIONS ?=
bench-gpu:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) -m benchmarks.gpu $(GPU_OPTIONS)

# Each paper's headline at small scale under runner=netem (root), then the simulator's check
# against those runs and its projection to 16-512 workers; about an hour on two cores.
reproduce: install
	$(BIN)/python -m benchmarks.reproduce --write

clean:
	rm -rf $(VENV) build outputs multirun .pytest_cache .ruff_cache .mypy_cache
