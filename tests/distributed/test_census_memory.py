"""Peak memory of all 8 strategies, measured, against the model's prediction (issue 10, item 6).

One bench launch (4 gloo ranks as 2 nodes x 2, tiny Llama; shared with test_census_bf16_master.py): each strategy runs a warm-up step,
a timed step, then one step under torch's MemTracker (tensor memory of the rank: parameters,
gradients, optimizer state, activations, the engine's own buffers). The prediction is the
planner's (`bench.results.predict.predict` -> `planner.evaluate` -> the memory model) for the same
config, with DeepSpeed's own buffers (its ipg / reduce buckets) from engines/deepspeed.py. Each must
be within 10% of the measurement; so must issue 17's run options (VARIANTS), in the same launch.
"""

from __future__ import annotations

import importlib.util

import pytest

from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.inputs.stored import RowChange, row_with
from prism_strategy.strategies import STRATEGY_NAMES

pytestmark = pytest.mark.distributed
TOLERANCE = 0.10


VARIANTS = {
    "fsdp_full_shard+adamw-foreach": {"strategy": "fsdp_full_shard", "optimizer": "adamw-foreach"},
    "ddp+loss-chunked": {"strategy": "ddp", "loss": "chunked"},
    "fsdp_full_shard+sac": {"strategy": "fsdp_full_shard", "ckpt_freq": "sac"},
    "zero3+bf16-mixed": {"strategy": "zero3", "precision": "bf16-mixed"},
}
"""Issue 17's run options in the same launch: foreach AdamW forced on CPU (the CUDA/XPU default),
runtime/loss.py's chunked loss, torchtitan's selective checkpointing (runtime/sac.py), and the
held-out shape of item 8 (ZeRO-3 bf16-mixed, 24% over when the issue was filed; then 9.7%: the
measurement missed DeepSpeed's init-time buffers, bench/launch/worker.optimizer_state; with them
and ZeRO-3's persistent params and grad partition buffer modelled, 0.1%: issue 25 item 8)."""


HAS_PEFT = importlib.util.find_spec("peft") is not None
LORA_STRATEGIES = ("ddp", "fsdp_full_shard")
BASE = dict(
    model="tiny-llama",
    nproc=4,
    ranks_per_node=2,
    micro_batch=4,
    seq_len=128,
    steps=1,
    warmup=1,
    precision="fp32",
    ckpt_freq=0,
    grad_accum=1,
    timeout_s=240,
)


def MEMORY_RUNS() -> dict[str, dict]:
    """Every strategy and VARIANTS, launched by conftest's memory_bench with test_census_bf16_master.py's."""
    base = base_config(**BASE)
    cases = {s: {"strategy": s} for s in STRATEGY_NAMES} | VARIANTS
    runs = {name: row_with(base, RowChange(**c)) for name, c in cases.items()}
    if HAS_PEFT:  # the same runs under peft's LoRA (bench/launch/worker.py with_lora)
        lora = base_config(**BASE, lora={"r": 4, "target_modules": ["q_proj", "v_proj"]})
        runs |= {f"lora-{s}": row_with(lora, RowChange(strategy=s)) for s in LORA_STRATEGIES}
        every = base_config(**BASE, lora={"r": 8, "target_modules": "all-linear"})  # MLP inputs kept too
        runs["lora-all-linear-fsdp_full_shard"] = row_with(every, RowChange(strategy="fsdp_full_shard"))
    return runs


@pytest.fixture(scope="module")
def benched(memory_bench):
    return memory_bench["test_census_memory"]


LORA_RUNS = [*(f"lora-{s}" for s in LORA_STRATEGIES), "lora-all-linear-fsdp_full_shard"] if HAS_PEFT else []
"""LoRA: a frozen block keeps only what its own backward needs, the adapted Linears' inputs (lora_A's)
and the adapters' r-wide middles, not the frozen Linears' inputs (estimate/memory.py
part_block_bytes_per_token). q,v at r=4 was 22-24% over when every block input was counted; every
Linear at r=8 (MLP inputs and inner activations kept too) was measured only after the change."""


@pytest.mark.parametrize("strategy", [*STRATEGY_NAMES, *VARIANTS, *LORA_RUNS])
def test_peak_memory_within_10_percent_of_prediction(benched, strategy):
    r = benched[strategy]
    assert r.status == "ok", (r.measured.get("error"), r.measured.get("log_tail"))
    measured, predicted = r.measured["peak_memory_bytes"], r.predicted["memory_bytes"]
    err = (predicted - measured) / measured
    assert abs(err) <= TOLERANCE, (
        f"{strategy}: predicted {predicted / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB ({100 * err:+.1f}%)"
    )


@pytest.mark.skipif(not HAS_PEFT, reason="peft is not installed")
@pytest.mark.parametrize("strategy", LORA_STRATEGIES)
def test_bench_runs_lora_and_the_frozen_base_needs_no_gradients_or_adamw_state(benched, strategy):
    """bench --lora for real: the run ends ok, stored with its adapters, and its measured peak is
    below full training's (no gradient or AdamW state for the frozen base)."""
    r, full = benched[f"lora-{strategy}"], benched[strategy]
    assert r.status == "ok", (r.measured.get("error"), r.measured.get("log_tail"))
    assert r.config["lora"] == {"r": 4, "target_modules": ["q_proj", "v_proj"]}
    assert r.measured["peak_memory_bytes"] < full.measured["peak_memory_bytes"]
    assert r.predicted["memory_bytes"] < full.predicted["memory_bytes"]
