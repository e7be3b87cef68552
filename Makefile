# The two commands of the README: `make demo` and `make test`.
# `make notebooks` re-executes notebooks/*.py (jupytext percent sources) into the
# committed notebooks/*.ipynb, outputs included.
# Both create .venv on first use, installing torch==2.13.0 *before* the package
# so that pip takes the CPU wheel instead of pulling CUDA packages, then compiling
# the numba kernels once into numba's cache (`consensuskit warmup`, ~30 s of CPU) so
# that the demo and the first fits do not compile.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow lint bench notebooks clean-venv

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -e ".[test]"
	$(BIN)/consensuskit warmup
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/consensuskit demo

NOTEBOOKS_STAMP := $(VENV)/.notebooks-installed

$(NOTEBOOKS_STAMP): $(STAMP)
	$(BIN)/pip install -q --disable-pip-version-check -e ".[test,notebooks]"
	touch $(NOTEBOOKS_STAMP)

notebooks: $(NOTEBOOKS_STAMP)
	OMP_NUM_THREADS=1 $(BIN)/jupytext --to ipynb --execute notebooks/0*.py

test: $(STAMP)
	$(BIN)/ruff check consensuskit tests experiments reproduce
	$(BIN)/python -m pytest -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

lint: $(STAMP)
	$(BIN)/ruff check consensuskit tests experiments reproduce

clean-venv:
	rm -rf $(VENV)
