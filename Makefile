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
	$(PIP) install -q -c constraints.txt -e '.[dev,peft]'
	$(PY) -c "import torch; v = torch.__version__; assert v.startswith('2.13.0'), 'torch was replaced: ' + v"
	touch $(STAMP)

setup: $(STAMP)

BENCH := --model small-llama --nproc 4 --ranks-per-node 2 --seq-len 128
CLI := $(VENV)/bin/prism-strategy

run: setup
	$(CLI) plan --model qwen3-0.6b --mode e2e --platform aurora --nodes 2 --seq-len 512 --micro-batch 8 --sweep-nodes 1,2,4,8,16
	@echo "== the loop on this machine's CPU (4 gloo ranks as 2 nodes x 2): measure one strategy, calibrate, predict the rest =="
	mkdir -p out && rm -f out/calibrate.db* out/run.db* out/cpu-calibration.toml
	for mb in 1 2 4; do $(CLI) bench $(BENCH) --micro-batch $$mb --strategies ddp --db out/calibrate.db > /dev/null || exit 1; done
	$(CLI) calibrate --platform cpu --db out/calibrate.db --out out/cpu-calibration.toml --fit steps
	$(CLI) bench $(BENCH) --micro-batch 2 --strategies fsdp_full_shard,hsdp_shard_grad_op --db out/run.db > /dev/null
	@echo "== held out (not in the calibration): FSDP and HSDP, predicted by the cpu preset as shipped =="
	$(CLI) compare --db out/run.db --calibration none
	@echo "== the same runs predicted after calibrating on DDP's three runs alone =="
	$(CLI) compare --db out/run.db --calibration out/cpu-calibration.toml

test: setup
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check --output-format concise .
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) -m pytest -q -x -rR -n 2 --durations=15 tests/distributed tests/unit tests/cli

bench: setup
	$(PY) benchmarks/plan_latency.py
