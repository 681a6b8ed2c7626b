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

.PHONY: setup run test lint gpu-test clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# CPU torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[cli,pipeline,train,serve,dev]"
	touch $(STAMP)

run: setup
	$(BIN)/python -m flows.pipeline

test: setup
	$(BIN)/ruff check cudal1 flows tasks tests benchmarks
	$(BIN)/python -m pytest -q

lint: setup
	$(BIN)/ruff check cudal1 flows tasks tests benchmarks

gpu-test:
	# On the device machine (torch + core only): PYTHONPATH=. python -m pytest -m gpu tests/gpu
	PYTHONPATH=. $(PY) -m pytest -q -m gpu -p no:cacheprovider tests/gpu

clean:
	rm -rf $(VENV)
