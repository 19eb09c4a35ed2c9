# The two commands a newcomer needs: `make demo` and `make test`. Both create the virtualenv
# (.venv) and install what they need; pip's download cache makes reruns fast.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,cli,sim,pipeline,edge,workers,infra,torch
STAMP := $(VENV)/.installed

.PHONY: demo demo-faults test lint typecheck unit bench clean clean-numba venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m kvcompass demo

demo-faults: $(STAMP)
	$(BIN)/python -m kvcompass demo-faults

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check kvcompass

typecheck: $(STAMP)
	$(BIN)/mypy kvcompass

test: lint typecheck
	$(BIN)/python -m pytest -q

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

bench: $(STAMP)
	$(BIN)/python bench/index_ops.py --entries 1000000

clean: clean-numba
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# numba's on-disk cache does not notice edits in modules a kernel calls: drop it after such edits
clean-numba:
	find kvcompass sim pipeline workers edge -path '*/__pycache__/*.nb[ic]' -delete
