"""DeepSpeed's bf16 master weights and optimizer states (bf16-pure on DeepSpeed: ds_config bf16 with
bf16_master_weights_and_grads + bf16_optimizer_states, deepspeedai/DeepSpeed #7700), measured.

One bench launch of 4 gloo ranks as 2 nodes x 2, shared with test_census_memory.py (conftest's
memory_bench), ZeRO-2 and ZeRO-3 at bf16-mixed and bf16-pure, each step's peak under torch's MemTracker with DeepSpeed's
partitions handed to it:
- tiny Llama (micro-batch 4, seq 128): every peak within 10% of the planner's prediction;
- small Llama (5.0M parameters, micro-batch 1, seq 32), where model states are most of the peak:
  the memory bf16-pure saves against bf16-mixed, measured, within 10% of the saving predicted at
  ZeRO-3 (DeepSpeedExamples' bf16_master_weight example: 20 -> 12 bytes per parameter), and
  ZeRO-2's bf16-pure peak within 10%. Measured when written (this machine, torch 2.13.0+cpu,
  deepspeed 0.19.8): ZeRO-3 saves 7.15 MiB, predicted 7.16; ZeRO-2 bf16-pure 76.22 MiB, predicted
  76.22. (small Llama's ZeRO-3 peaks themselves are 12-14% under the prediction at either
  precision, bf16-mixed included: not asserted here.)"""

from __future__ import annotations

import pytest

from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.inputs.stored import RowChange, row_with

pytestmark = pytest.mark.distributed
TOLERANCE = 0.10
CASES = {f"{s}+{p}": {"strategy": s, "precision": p} for s in ("zero2", "zero3") for p in ("bf16-mixed", "bf16-pure")}
SHAPES = {
    "tiny": dict(model="tiny-llama", micro_batch=4, seq_len=128),
    "small": dict(model="small-llama", micro_batch=1, seq_len=32),
}


def MEMORY_RUNS() -> dict[str, dict]:
    """Both shapes x CASES, launched by conftest's memory_bench with test_census_memory.py's."""
    runs = {}
    for shape, kw in SHAPES.items():
        base = base_config(
            nproc=4,
            ranks_per_node=2,
            steps=1,
            warmup=1,
            precision="bf16-mixed",
            ckpt_freq=0,
            grad_accum=1,
            timeout_s=240,
            **kw,
        )
        runs |= {f"{shape}/{case}": row_with(base, RowChange(**c)) for case, c in CASES.items()}
    return runs


@pytest.fixture(scope="module")
def benched(memory_bench):
    runs = memory_bench["test_census_bf16_master"]
    return {shape: {case: runs[f"{shape}/{case}"] for case in CASES} for shape in SHAPES}


def _peaks(r) -> tuple[float, float]:
    assert r.status == "ok", (r.measured.get("error"), r.measured.get("log_tail"))
    return r.measured["peak_memory_bytes"], r.predicted["memory_bytes"]


@pytest.mark.parametrize("case", list(CASES))
def test_peak_memory_within_10_percent_of_prediction(benched, case):
    measured, predicted = _peaks(benched["tiny"][case])
    err = (predicted - measured) / measured
    assert abs(err) <= TOLERANCE, (
        f"{case}: predicted {predicted / 2**20:.2f} MiB, measured {measured / 2**20:.2f} MiB ({100 * err:+.1f}%)"
    )


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_bf16_master_weights_need_less_memory(benched, shape, stage):
    mixed, _ = _peaks(benched[shape][f"{stage}+bf16-mixed"])
    pure, _ = _peaks(benched[shape][f"{stage}+bf16-pure"])
    assert pure < mixed


def test_zero3_saves_what_the_model_says_where_model_states_dominate(benched):
    mixed_m, mixed_p = _peaks(benched["small"]["zero3+bf16-mixed"])
    pure_m, pure_p = _peaks(benched["small"]["zero3+bf16-pure"])
    saved, predicted = mixed_m - pure_m, mixed_p - pure_p
    assert saved == pytest.approx(predicted, rel=TOLERANCE), (saved / 2**20, predicted / 2**20)


def test_zero2_bf16_pure_peak_where_model_states_dominate(benched):
    measured, predicted = _peaks(benched["small"]["zero2+bf16-pure"])
    assert predicted == pytest.approx(measured, rel=TOLERANCE)
