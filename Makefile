# Everything sets itself up: `make serve` and `make test` work on a fresh clone.
PYTHON ?= python3.11
VENV := .venv
# cpu or cuda: which torch and ONNX Runtime builds go in (requirements-$(ACCEL).txt). Remembered in the venv,
# so `make setup ACCEL=cuda` once, then `make serve` and `make test`, stay on the CUDA build.
ACCEL ?= $(or $(shell cat $(VENV)/.accel 2>/dev/null),cpu)
ifeq ($(filter $(ACCEL),cpu cuda),)
$(error ACCEL must be cpu or cuda, not '$(ACCEL)')
endif
STAMP := $(VENV)/.installed-$(ACCEL)

.PHONY: setup serve test test-container bench bench-guard bento image docs clean

setup: $(STAMP)

# requirements-cpu.txt pins CPU torch from PyTorch's CPU index (a plain `torch` would pull a multi-GB CUDA
# build); torch goes in first, alone and without its dependencies, so that only torch is asked of that index.
# requirements-cuda.txt pins PyPI's torch (built for CUDA 13) and onnxruntime-gpu. The two ONNX Runtime
# packages cannot share a venv: the one of the other accelerator goes out first.
ACCEL_PINS := $(shell grep -E '^[a-z]' requirements-$(ACCEL).txt)
TORCH_INDEX := $(shell sed -n 's/^--extra-index-url //p' requirements-$(ACCEL).txt)
$(STAMP): requirements.txt requirements-$(ACCEL).txt requirements-test.txt pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --quiet --upgrade pip
	$(VENV)/bin/pip uninstall --quiet --quiet --yes onnxruntime onnxruntime-gpu
	$(if $(TORCH_INDEX),$(VENV)/bin/pip install --quiet --quiet --retries 1 --no-deps --extra-index-url $(TORCH_INDEX) $(filter torch==%,$(ACCEL_PINS)))
	$(VENV)/bin/pip install --quiet --quiet $(ACCEL_PINS) -r requirements.txt -r requirements-test.txt
	$(VENV)/bin/pip install --quiet --quiet --no-deps -e .
	rm -f $(VENV)/.installed-*
	echo $(ACCEL) > $(VENV)/.accel
	touch $(STAMP)

serve: setup
	$(VENV)/bin/embento serve

# ruff (lint, then the format check) and mypy (pyproject.toml's [tool.mypy]: the bundle) first, then the suite.
# --durations=15: where the suite's time goes, in every run's closing lines (CI's included).
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	BENTOML_DO_NOT_TRACK=True HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest --durations=15

# The CPU image built with buildah from a base made with mmdebstrap, run with podman with no network, then
# the Kubernetes manifests played with it by `podman kube play` (installs those from Debian's packages when
# missing; about 5 minutes and 8 GB of disk at the peak here).
test-container: setup
	BENTOML_DO_NOT_TRACK=True $(VENV)/bin/python -m pytest -m container -s tests/packaging/test_container.py \
		tests/packaging/test_kube_play.py

# embento:<version>-cpu and embento:<version>-cuda, serving the models embento.yaml names.
bento: setup
	$(VENV)/bin/embento build

# Their images, with Docker when its daemon answers, else buildah or podman (docs/deployment.md: Containers). After
# `make bento`: a Bento's version is fixed, so building it again needs `bentoml delete embento:<version>-<accel>`.
image: setup
	$(VENV)/bin/embento containerize

# The benchmark matrix, into docs/benchmarks.md (about 17 minutes here).
bench: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python bench/run_all.py

# CI: a one-minute benchmark that fails only below 40 % of the in-process ceiling (a gross regression).
bench-guard: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python bench/run_all.py --guard

# docs/configuration.md, from the configuration object and the command's flags (a test checks it is current).
docs: setup
	$(VENV)/bin/python docs/make_configuration.py

# The reference venv of issue 35's tests (.venv-reference: PyLate and FlagEmbedding, which cannot share .venv; see
# requirements-reference.txt). The tests' session builds it with this target. Every package is pinned there, so
# all go in with --no-deps; CPU torch first, alone, as in `setup` (from PyTorch's CPU index, or this machine's disk).
REFERENCE_VENV := .venv-reference
REFERENCE_STAMP := $(REFERENCE_VENV)/.installed
REFERENCE_TORCH := $(shell grep -E '^torch==' requirements-reference.txt)
CPU_TORCH_INDEX := $(shell sed -n 's/^--extra-index-url //p' requirements-cpu.txt)

.PHONY: reference-venv
reference-venv: $(REFERENCE_STAMP)

$(REFERENCE_STAMP): requirements-reference.txt requirements-cpu.txt
	test -x $(REFERENCE_VENV)/bin/python || $(PYTHON) -m venv $(REFERENCE_VENV)
	rm -f $(REFERENCE_STAMP)
	$(REFERENCE_VENV)/bin/pip install --quiet --quiet --retries 1 --no-deps --extra-index-url $(CPU_TORCH_INDEX) \
		$(REFERENCE_TORCH)
	$(REFERENCE_VENV)/bin/pip install --quiet --quiet --no-deps -r requirements-reference.txt
	touch $(REFERENCE_STAMP)

# The Qwen3-VL reference venv (.venv-vl-reference): sentence-transformers 6 with transformers' Qwen3VLProcessor, which
# needs torchvision, and PyPI's torchvision imports only beside PyPI's torch (requirements-vl-reference.txt). Empty
# PIP_FIND_LINKS: this machine's local CPU torch wheel would otherwise be preferred. About 2 minutes and 6 GB here.
VL_REFERENCE_VENV := .venv-vl-reference
VL_REFERENCE_STAMP := $(VL_REFERENCE_VENV)/.installed

.PHONY: vl-reference-venv
vl-reference-venv: $(VL_REFERENCE_STAMP)

$(VL_REFERENCE_STAMP): requirements-vl-reference.txt
	test -x $(VL_REFERENCE_VENV)/bin/python || $(PYTHON) -m venv $(VL_REFERENCE_VENV)
	rm -f $(VL_REFERENCE_STAMP)
	PIP_FIND_LINKS= $(VL_REFERENCE_VENV)/bin/pip install --quiet --quiet --retries 1 -r requirements-vl-reference.txt
	touch $(VL_REFERENCE_STAMP)

clean:
	rm -rf $(VENV) .venv-reference .venv-vl-reference .pytest_cache
