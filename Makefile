# The two Quick-start commands (`make dry-run`, `make test`) work from a fresh clone: the first
# call makes a virtual environment in .venv and installs the kit into it (CPU build of torch
# unless TORCH says otherwise), later calls reuse it.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install test dry-run notebooks

$(VENV)/.installed: requirements.txt requirements-test.txt pyproject.toml .ci/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -c .ci/constraints.txt -r requirements.txt -r requirements-test.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

install: $(VENV)/.installed

test: install
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n 2 --dist loadgroup

dry-run: install
	$(BIN)/arc-kit dry-run

notebooks: install
	$(BIN)/jupytext --sync notebooks/*.py
