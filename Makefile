# Everything sets itself up: `make serve` and `make test` work on a fresh clone.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: setup serve test bench bench-guard bento clean

setup: $(STAMP)

# requirements-cpu.txt pins CPU torch from PyTorch's CPU index (a plain `torch` would pull a multi-GB CUDA
# build). torch goes in first, alone and without its dependencies, so that only torch is asked of that index.
CPU_PINS := $(shell grep -E '^[a-z]' requirements-cpu.txt)
TORCH_INDEX := $(shell sed -n 's/^--extra-index-url //p' requirements-cpu.txt)
$(STAMP): requirements.txt requirements-cpu.txt requirements-test.txt pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet --quiet --retries 1 --no-deps --extra-index-url $(TORCH_INDEX) $(filter torch==%,$(CPU_PINS))
	$(VENV)/bin/pip install --quiet --quiet $(CPU_PINS) -r requirements.txt -r requirements-test.txt
	$(VENV)/bin/pip install --quiet --quiet --no-deps -e .
	touch $(STAMP)

serve: setup
	$(VENV)/bin/embento serve

test: setup
	BENTOML_DO_NOT_TRACK=True HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest

# embento:<version>-cpu and embento:<version>-cuda, serving the models embento.yaml names.
bento: setup
	$(VENV)/bin/embento build

# The benchmark matrix, into docs/benchmarks.md (about 17 minutes here).
bench: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python bench/run_all.py

# CI: a one-minute benchmark that fails only below 40 % of the in-process ceiling (a gross regression).
bench-guard: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/python bench/run_all.py --guard

clean:
	rm -rf $(VENV) .pytest_cache
