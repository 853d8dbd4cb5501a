# Two commands do everything on a fresh machine: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
export TORCH_EXTENSIONS_DIR := $(CURDIR)/.torch_extensions

.PHONY: setup run test bench

$(STAMP): pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0 numpy
	$(PIP) install -q -c constraints.txt -e '.[dev]'
	$(PY) -c "import torch; v = torch.__version__; assert v.startswith('2.13.0'), 'torch was replaced: ' + v"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/prism-strategy plan --model qwen3-0.6b --mode e2e --platform aurora --nodes 2 --seq-len 512 --micro-batch 8 --sweep-nodes 1,2,4,8,16

test: setup
	$(PY) -m pytest -q -x tests

bench: setup
	$(PY) benchmarks/plan_latency.py
