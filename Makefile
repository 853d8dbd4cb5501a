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

BENCH := --model small-llama --nproc 4 --ranks-per-node 2 --micro-batch 2 --seq-len 128
RUN_DB := $(CURDIR)/out/run.db

run: setup
	$(VENV)/bin/prism-strategy plan --model qwen3-0.6b --mode e2e --platform aurora --nodes 2 --seq-len 512 --micro-batch 8 --sweep-nodes 1,2,4,8,16
	@echo "== a short real CPU benchmark (4 gloo ranks as 2 nodes x 2) beside the prediction =="
	mkdir -p out
	$(VENV)/bin/prism-strategy bench $(BENCH) --strategies ddp,fsdp_full_shard,hsdp_shard_grad_op --db $(RUN_DB)
	$(VENV)/bin/prism-strategy compare --db $(RUN_DB)

test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check --output-format concise .
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) -m pytest -q -x --durations=15 tests

bench: setup
	$(PY) benchmarks/plan_latency.py
