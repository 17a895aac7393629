# One obvious command per workflow. Every target sets itself up.
PYTHON ?= python3
VENV ?= .venv
SERVE_VENV ?= .venv-serve
HOST ?= 127.0.0.1
PORT ?= 8000
MODEL_REPOSITORY ?= models
# Installs come from this project's files only. uv resolves against the package index and never picks up
# local wheel folders, so torch resolves to the regular PyPI build pinned in pyproject.toml.
UV = $(VENV)/bin/uv

.PHONY: setup setup-serve test lint serve default-model bench-train clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet "uv>=0.5"
	$(UV) pip install --python $(VENV)/bin/python -e ".[serve,train,export,dev,bench]"
	touch $@

setup: $(VENV)/.installed
	@bash scripts/install-system-deps.sh

$(SERVE_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install --quiet "uv>=0.5"
	$(SERVE_VENV)/bin/uv pip install --python $(SERVE_VENV)/bin/python -e ".[serve,bench]"
	touch $@

setup-serve: $(SERVE_VENV)/.installed

test: setup lint
	$(VENV)/bin/python -m pytest

lint: setup
	$(VENV)/bin/ruff check training exporters service tests scripts
	$(VENV)/bin/ruff format --check training exporters service tests scripts
	$(VENV)/bin/mypy

serve: setup-serve
	$(SERVE_VENV)/bin/detect-serve --model-repository $(MODEL_REPOSITORY) --host $(HOST) --port $(PORT)

clean:
	rm -rf $(VENV) $(SERVE_VENV) .pytest_cache .mypy_cache .ruff_cache

# The built-in default model, reproducibly: synthetic data (seed 0) -> the CPU preset from scratch ->
# ONNX with in-graph NMS (weights stored as fp16 to stay small, compute fp32) -> verified on the val split.
DEFAULT_MODEL ?= models/ssd300-synth/1
SYNTH_DATA ?= data/synth
DEFAULT_RUN ?= runs/ssd300-cpu-small

default-model: setup
	$(VENV)/bin/python scripts/bench_train_cpu.py --data $(SYNTH_DATA) --output $(DEFAULT_RUN)
	$(VENV)/bin/detect-export onnx --checkpoint $(DEFAULT_RUN)/checkpoint.pt --output $(DEFAULT_MODEL) \
		--weight-storage float16 --force
	$(VENV)/bin/detect-export verify --artifact $(DEFAULT_MODEL) --checkpoint $(DEFAULT_RUN)/checkpoint.pt \
		--data $(SYNTH_DATA)

bench-train: setup
	$(VENV)/bin/python scripts/bench_train_cpu.py --data $(SYNTH_DATA) --output $(DEFAULT_RUN)
