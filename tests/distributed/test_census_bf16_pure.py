"""Issue 26 (what is left, item 1): bench and census run bf16-pure for real, as the plan models it
(specs/training.py from_precision: bf16 params, gradients and AdamW state, no fp32 master): the
model is cast to bf16 and wrapped without autocast, so DDP all-reduces and FSDP2 reduce-scatters
bf16 gradients, where bf16-mixed reduces fp32 ones. One census launch on 4 gloo ranks (2 x 2):
tiny Llama and a projector-mode VLM (bf16 pixels into a bf16 encoder), held against the engine
model's collectives for bf16-pure (DeepSpeed's bf16-pure, its bf16 master weights, is
tests/distributed/test_census_bf16_master.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prism_strategy.bench.collectives.census import run_censuses
from prism_strategy.cli.bench_inputs import census_base

pytestmark = pytest.mark.distributed
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "census"
SHAPES = {
    "llm": dict(model="tiny-llama"),
    "projector": dict(model="tiny-llama", mode="projector", vision=str(FIXTURES / "tiny-siglip.toml")),
}
STRATEGIES = ["ddp", "fsdp_full_shard", "hsdp_full_shard"]


@pytest.fixture(scope="module")
def census():
    bases = [
        census_base(nproc=4, ranks_per_node=2, micro_batch=2, seq_len=32, precision="bf16-pure", timeout_s=240, **kw)
        for kw in SHAPES.values()
    ]
    return dict(zip(SHAPES, run_censuses(bases, STRATEGIES)))


def _rows(report, strategy):
    (s,) = [s for s in report.strategies if s.strategy == strategy]
    assert s.recorded and s.ranks_agree, s.error
    return s


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bf16_pure_reduces_bf16_gradients_as_the_engine_model_says(census, shape, strategy):
    s = _rows(census[shape], strategy)
    table = "\n".join(str(r) for r in s.rows)
    grads = [r for r in s.rows if r.calls_recorded and r.op in ("all_reduce", "reduce_scatter")]
    assert grads and all(r.dtype == "bfloat16" for r in grads), table
    for r in s.rows:
        assert r.bytes_predicted == pytest.approx(r.bytes_recorded, rel=0.02), table
    assert s.ok, table
