# The two commands of the README: `make demo` and `make test` (the linter, then the test suite).
# Both create .venv if needed, install torch==2.13.0 first (the CPU build lies on this
# machine's disk; any other spec would pull a multi-GB CUDA build), then the project with the
# extras the suite needs (train: the RL core; dev, trl, ray; serve: `transformers serve` and the openai client for
# the end-to-end tests of `ragen eval`).
# Elsewhere choose the torch build by its index (docs/install.md), e.g.
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
PYTHON ?= python3
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LINT_PATHS := ragen_envs ragen_core theory_checks benchmarks tests scripts

.PHONY: demo test bench verify lint clean mutation

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): $(PY) pyproject.toml setup.py
	$(PY) -m pip install --quiet $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet -e ".[train,dev,trl,ray,serve]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m ragen_core.apps.demo

# Lint first: it takes seconds and fails fast; the suite takes minutes.
test: lint
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n 2 --dist loadgroup

bench: $(STAMP)
	$(PY) -m benchmarks.run_all

verify: $(STAMP)
	$(PY) -m theory_checks

# Mutation testing of the RL core's math and theory_checks' reference rules (mutmut, minutes per module on one
# core): the score and every surviving mutant go to docs/theory_report/mutation.md; exit 1 when a survivor is
# neither killed nor shown equivalent.
mutation: $(STAMP)
	nice -n 15 $(PY) mutation/run_mutmut.py --resume --check \
		--report docs/theory_report/mutation.md

# ruff, then the import contracts of pyproject.toml [tool.importlinter] (the layers of docs/architecture.md).
lint: $(STAMP)
	$(PY) -m ruff check $(LINT_PATHS)
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
