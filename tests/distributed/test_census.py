"""Census in CI: what each of the 8 strategies' real engines issue in one optimizer step
(torch.profiler on 4 gloo ranks as 2 nodes x 2) against the engine model's prediction.

Four shapes, all in one launch with all 8 strategies: tied and untied embeddings (tiny Llama),
a projector-mode model (tiny SigLIP + projector + tiny Llama, frozen encoder and backbone), and a
tiny Qwen2-MoE (every expert in one 3-D tensor whose dim 0, 3 experts, FSDP2 pads to 4 ranks).
Gradient accumulation 2, so per-micro-step and per-step collectives differ. Asserted per
strategy: the op kinds are equal, payload bytes are within 2% per (op, group, dtype), calls are
exact for FSDP units and within one for buckets (DDP, DeepSpeed).
The prediction is the engine modules' (`prism_strategy.engines.step_collectives`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prism_strategy.bench.collectives.census import run_censuses
from prism_strategy.cli.bench_inputs import census_base
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


@pytest.fixture(scope="module")
def census():
    """ONE launch: the four shapes x all 8 strategies."""
    bases = [
        census_base(
            nproc=4,
            ranks_per_node=2,
            micro_batch=2,
            seq_len=32,
            grad_accum=2,
            precision="bf16-mixed",
            timeout_s=240,
            **kw,
        )
        for kw in SHAPES.values()
    ]
    reports = dict(zip(SHAPES, run_censuses(bases, list(STRATEGY_NAMES))))
    return reports.__getitem__


def _one(report, strategy):
    (s,) = [s for s in report.strategies if s.strategy == strategy]
    assert s.recorded, f"{strategy} did not run: {s.error}"
    assert s.ranks_agree, s.error
    return s


CASES = [pytest.param(shape, s, id=f"{shape}-{s}") for shape in SHAPES for s in STRATEGY_NAMES]


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
