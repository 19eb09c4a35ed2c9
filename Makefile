# The two commands a newcomer needs: `make demo` and `make test`. Both create the virtualenv
# (.venv) and install what they need; pip's download cache makes reruns fast.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,cli,sim,pipeline,edge,workers,infra,torch,conformance
STAMP := $(VENV)/.installed
# The engines' own KV-event code for the conformance tests (tests/integration/engines.py): the
# pinned wheels WITHOUT their dependencies (torch, CUDA...; pip extras cannot say --no-deps), in
# a cache directory outside the virtualenv, so no half-installed sglang/vllm is importable there.
ENGINES := sglang==0.5.23 vllm==0.33.0
KVCOMPASS_CACHE ?= $(HOME)/.cache/kvcompass
ENGINES_DIR ?= $(KVCOMPASS_CACHE)/engines/sglang-0.5.23_vllm-0.33.0

.PHONY: demo demo-faults test test-nojit lint typecheck unit bench clean clean-numba venv engines warm

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

# numba's on-disk cache of every kernel the demo's processes run (all are cache=True), compiled
# once here rather than by two maintenance units and three edges at once inside the demo's
# start-up (a fresh clone on a busy 2-core machine: minutes). Again whenever a source changes.
WARM := $(VENV)/.warm
KERNEL_SOURCES := $(shell find kvcompass pipeline edge sim -name '*.py' -not -path '*/__pycache__/*')

warm: $(WARM)

$(WARM): $(STAMP) $(KERNEL_SOURCES)
	$(BIN)/python -m e2e.warm
	touch $@

engines: $(ENGINES_DIR)/.installed

$(ENGINES_DIR)/.installed: | $(STAMP)
	$(BIN)/python -m pip install -q --no-deps --no-compile --upgrade --target $(ENGINES_DIR) $(ENGINES)
	touch $@

demo: $(WARM)
	$(BIN)/kvcompass demo

demo-faults: $(WARM)
	$(BIN)/kvcompass demo-faults

# Every package, strict (pyproject's [tool.mypy]); ruff formats the Python in Markdown too.
PACKAGES := kvcompass wire pipeline edge workers sim e2e bench cli

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy $(PACKAGES)

test: lint typecheck engines test-nojit $(WARM)
	KVCOMPASS_ENGINES_DIR=$(ENGINES_DIR) $(BIN)/python -m pytest -q

# The core's tests with the JIT off: every kernel runs as the plain Python it is written in, so
# the twins and property tests check the kernels' own lines (and tests/unit/kvcompass/test_jit.py
# checks the JIT really is off). About 30 s on the 2-vCPU dev VM. numba's uint64 arithmetic wraps
# silently; numpy's scalars wrap the same but warn, hence the filter.
test-nojit: $(STAMP)
	NUMBA_DISABLE_JIT=1 $(BIN)/python -m pytest -q -p no:cacheprovider \
		-W "ignore:overflow encountered in scalar:RuntimeWarning" tests/unit/kvcompass

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

bench: $(STAMP)
	$(BIN)/python bench/index_ops.py --entries 1000000

clean: clean-numba
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

# numba's on-disk cache does not notice edits in modules a kernel calls: drop it after such edits
clean-numba:
	find kvcompass sim pipeline workers edge -path '*/__pycache__/*.nb[ic]' -delete
	rm -f $(WARM)
