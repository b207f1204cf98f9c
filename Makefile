# Two commands do all the setup: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
# A wheel index for torch, e.g. https://download.pytorch.org/whl/cu130 for a given CUDA build
# (docs/gpu.md); empty: the default index.
TORCH_INDEX ?=

.PHONY: demo test venv install install-test clean gpu-evidence

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Install torch (CPU build pinned) only when no torch is importable in the venv.
$(VENV)/.torch: $(VENV)/bin/python
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==$(TORCH_VERSION)" \
		$(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	touch $@

$(VENV)/.fgnn: $(VENV)/.torch pyproject.toml
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.fgnn-test: $(VENV)/.fgnn
	$(PY) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.fgnn
install-test: $(VENV)/.fgnn-test

# A small synthetic R-MAT graph (the default dataset) on 2 logical devices: 1 sampler + 1 trainer.
DEMO_FLAGS ?= --model sage --devices 2 --batch-size 256 --lr 0.01 --epochs 10

demo: install
	$(PY) launch.py $(DEMO_FLAGS) --report runs/demo/report.json

test: install-test
	$(PY) -m pytest -q

# On a GPU host (no venv, no Ray needed): every GPU check in one run, under runs/gpu-evidence
# (docs/gpu.md). A slim Ray brought in .whl/ is installed into that folder for the launch.py runs.
GPU_PY ?= python3
gpu-evidence:
	$(GPU_PY) bench/gpu_evidence.py --out runs/gpu-evidence --wheels .whl

clean:
	rm -rf $(VENV) runs .pytest_cache
