# Every target does its own set-up; setup is idempotent (a stamp file tracks pyproject.toml).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export DVC_NO_ANALYTICS := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup sandbox run test check lint docs gpu-test clean

setup: $(STAMP)

# torch comes first, from pip: pip takes the local CPU wheel (a bare `torch` requirement, or uv, would pull a
# multi-GB CUDA build); with torch 2.13.0 in place the project's range installs nothing more for it. The
# rest goes through uv: 44 s from an empty cache against pip's 160 s from a warm one, same versions
# (docs/learned.md). Bytecode is compiled at install: stages start as fresh processes, and where
# PYTHONDONTWRITEBYTECODE is set nothing would ever be cached.
UV_VERSION := 0.13.9

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(BIN)/uv pip install --python $(BIN)/python --compile-bytecode --quiet -e ".[cli,pipeline,train,serve,dev]"
	$(MAKE) --no-print-directory sandbox
	touch $(STAMP)

# As root, the evaluator runs each untrusted program under a fresh unprivileged uid. That uid must be
# able to run the interpreter: give "others" traverse-only (x, not r) on the directories above it
# (e.g. /root for a pyenv Python). Nothing becomes listable or readable that was not already.
sandbox:
	@if [ "$$(id -u)" = 0 ]; then \
	  for p in $$($(BIN)/python -c "import sys,os;print(os.path.realpath(sys.executable), sys.base_prefix, os.getcwd())"); do \
	    d=$$p; while [ "$$d" != / ]; do [ -d "$$d" ] && chmod o+x "$$d"; d=$$(dirname "$$d"); done; \
	  done; \
	fi
	@$(BIN)/python -c "from cudal1.evaluator.sandbox import sandbox_available as s; print('evaluator sandbox (fresh uid per worker):', 'on' if s() else 'off (not root: workers share your uid)')"

# OVERLAY=FILE merges a params overlay over params.yaml for every stage, e.g. make run OVERLAY=configs/gpu-real-model.yaml
run: setup
	$(BIN)/python -m flows.pipeline $(if $(OVERLAY),--params-overlay $(OVERLAY))

# Three workers on two cores: many tests wait on subprocesses, servers and timeouts. loadgroup keeps the tests
# that share an expensive fixture on one worker, in file order (tests/conftest.py marks them). docs/testing.md.
PYTEST_WORKERS ?= 3
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# The whole suite (what CI runs).
test: setup
	$(BIN)/ruff check cudal1 flows tasks tests benchmarks docs
	$(BIN)/python -m pytest -q $(XDIST)

# The fast tier: every module, doctests and real evaluations, without the tests marked slow.
check: setup
	$(BIN)/ruff check cudal1 flows tasks tests benchmarks docs
	$(BIN)/python -m pytest -q -m "not slow and not gpu" $(XDIST)

lint: setup
	$(BIN)/ruff check cudal1 flows tasks tests benchmarks docs

# Regenerate the docs' generated parts: figures and tables from results/, the params and EvalConfig
# references from the code (`docs/generate.py --check` is what the tests run).
docs: setup
	$(BIN)/python docs/generate.py

gpu-test:
	# On the device machine (torch + core only): PYTHONPATH=. python -m pytest -m gpu tests/gpu
	PYTHONPATH=. $(PY) -m pytest -q -m gpu -p no:cacheprovider tests/gpu

clean:
	rm -rf $(VENV)
