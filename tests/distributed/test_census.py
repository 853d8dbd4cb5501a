"""Census in CI: what each of the 8 strategies' real engines issue in one optimizer step
(torch.profiler on 4 gloo ranks as 2 nodes x 2) against the engine model's prediction.

Four shapes, all in one launch with all 8 strategies: tied and untied embeddings (tiny Llama),
a projector-mode model (tiny SigLIP + projector + tiny Llama, frozen encoder and backbone), and a
tiny Qwen2-MoE (every expert in one 3-D tensor whose dim 0, 3 experts, FSDP2 pads to 4 ranks).
Gradient accumulation 2, so per-micro-step and per-step collectives differ. Asserted per
strategy: the op kinds are equal, payload bytes are within 2% per (op, group, dtype), calls are
exact for FSDP units and within one for buckets (DDP, DeepSpeed).
The prediction is the engine modules' (`prism_strategy.engines.step_collectives`).

The same launch runs tiny Llama under peft's LoRA (r=4 on q_proj, v_proj; the base frozen) for
DDP, FSDP2 and ZeRO-2 (issue 36): DDP all-reduces only the adapters' gradients, FSDP2 gathers
the frozen weights with the adapters and reduce-scatters only the adapters' gradients. Skipped
without peft (ZeRO-2 without DeepSpeed).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from prism_strategy.bench.collectives.census import run_census_jobs
from prism_strategy.cli.bench_inputs import census_base
from prism_strategy.specs.lora import LoraSpec, adapter_params
from prism_strategy.specs.presets import load_model
from prism_strategy.strategies import STRATEGY_NAMES

pytestmark = pytest.mark.distributed
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "census"
SHAPES = {
    "untied": dict(model="tiny-llama"),
    "tied": dict(model=str(FIXTURES / "tiny-llama-tied.toml")),
    "projector": dict(model="tiny-llama", mode="projector", vision=str(FIXTURES / "tiny-siglip.toml")),
    "moe": dict(model=str(FIXTURES / "tiny-qwen2-moe.toml")),
}
BUCKETS = ("ddp", "zero1", "zero2", "zero3")
LORA = {"r": 4, "target_modules": ["q_proj", "v_proj"]}
HAS_PEFT = importlib.util.find_spec("peft") is not None
LORA_STRATEGIES = ["ddp", "fsdp_full_shard"] + (["zero2"] if importlib.util.find_spec("deepspeed") else [])


@pytest.fixture(scope="module")
def census():
    """ONE launch: the four shapes x all 8 strategies, and the LoRA shape x LORA_STRATEGIES."""
    shapes = SHAPES | ({"lora": dict(model="tiny-llama", lora=LORA)} if HAS_PEFT else {})
    jobs = [
        (
            census_base(
                nproc=4,
                ranks_per_node=2,
                micro_batch=2,
                seq_len=32,
                grad_accum=2,
                precision="bf16-mixed",
                timeout_s=240,
                **kw,
            ),
            LORA_STRATEGIES if shape == "lora" else list(STRATEGY_NAMES),
        )
        for shape, kw in shapes.items()
    ]
    reports = dict(zip(shapes, run_census_jobs(jobs)))
    return reports.__getitem__


def _one(report, strategy):
    (s,) = [s for s in report.strategies if s.strategy == strategy]
    assert s.recorded, f"{strategy} did not run: {s.error}"
    assert s.ranks_agree, s.error
    return s


CASES = [pytest.param(shape, s, id=f"{shape}-{s}") for shape in SHAPES for s in STRATEGY_NAMES] + [
    pytest.param("lora", s, id=f"lora-{s}", marks=pytest.mark.skipif(not HAS_PEFT, reason="peft is not installed"))
    for s in LORA_STRATEGIES
]


@pytest.mark.parametrize(("shape", "strategy"), CASES)
def test_census_matches_engine_model(census, shape, strategy):
    s = _one(census(shape), strategy)
    rows = s.rows
    table = "\n".join(str(r) for r in rows)
    assert {r.op for r in rows if r.calls_predicted} == {r.op for r in rows if r.calls_recorded}, table
    for r in rows:
        assert r.bytes_predicted == pytest.approx(r.bytes_recorded, rel=0.02), table
        slack = 1 if strategy in BUCKETS else 0
        assert abs(r.calls_predicted - r.calls_recorded) <= slack, table
    assert s.ok


def test_census_records_what_the_engines_really_do(census):
    """Independent of any model: facts of the recording itself on the untied shape."""
    report = census("untied")
    rec = {s.strategy: {(r.op, r.group_size): r for r in s.rows if r.calls_recorded} for s in report.strategies}
    # HSDP: reduce-scatter inside the node (2), all-reduce across nodes (2 of 4 ranks), all-gather in the node
    assert {k[0] for k in rec["hsdp_full_shard"]} == {"all_gather", "reduce_scatter", "all_reduce"}
    assert all(g == 2 for _, g in rec["hsdp_full_shard"])
    # FSDP over the world: gathers and scatters over all 4 ranks, no all-reduce
    assert set(rec["fsdp_full_shard"]) == {("all_gather", 4), ("reduce_scatter", 4)}
    # full_shard re-gathers in backward: more all-gather bytes than shard_grad_op
    full, grad_op = rec["fsdp_full_shard"][("all_gather", 4)], rec["fsdp_shard_grad_op"][("all_gather", 4)]
    assert full.bytes_recorded > grad_op.bytes_recorded
    # DDP: gradients all-reduced over the world, once per optimizer step under no_sync
    ddp = rec["ddp"][("all_reduce", 4)]
    assert ddp.calls_recorded >= 1 and ddp.bytes_recorded > 0


@pytest.mark.skipif(not HAS_PEFT, reason="peft is not installed")
def test_lora_reduces_only_the_adapters_gradients(census):
    """DDP buckets only parameters with requires_grad (torch/nn/parallel/distributed.py
    _build_params_for_reducer); FSDP2 gathers every sharded parameter, frozen included, and
    reduce-scatters only the gradients that exist (_fsdp_param_group.py post_backward)."""
    adapters = adapter_params(load_model("tiny-llama"), LoraSpec(rank=4, targets=tuple(LORA["target_modules"])))
    lora, full = census("lora"), census("untied")

    def recorded(report, strategy, op):
        return sum(r.bytes_recorded for r in _one(report, strategy).rows if r.op == op and r.calls_recorded)

    # fp32 gradients (bf16-mixed autocast keeps the parameters fp32), once per optimizer step
    assert recorded(lora, "ddp", "all_reduce") == 4 * adapters
    assert 50 * recorded(lora, "ddp", "all_reduce") < recorded(full, "ddp", "all_reduce")
    assert recorded(lora, "fsdp_full_shard", "reduce_scatter") == 4 * adapters
    # the frozen base is gathered as in full training, the adapters with it
    assert recorded(lora, "fsdp_full_shard", "all_gather") > recorded(full, "fsdp_full_shard", "all_gather")
