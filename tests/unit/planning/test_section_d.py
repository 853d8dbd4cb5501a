"""PRISM's section D (OLMo-3 7B end to end, FSDP1 full_shard, one node, local batch 16): 7.3
samples/s measured (record D1). With the collective fit's communication terms the plan still
predicts it 6.8x too fast at the inferred text length (331 tokens) and 2.8x at the runs' cap (1,024
text + 196 image tokens). A strict xfail with its size, and a companion that the gap stays that
size (so a change that widens it is seen). Candidate causes, each with what would decide it:
- CCL_WORKER_COUNT=4 in those runs (oneCCL then refuses its GPU kernels for every collective,
  sycl_selection.cpp can_use_sycl_kernels: the whole FSDP traffic host-staged): prices D1 at +11%
  (benchmarks/oneccl_workers.py); decided by the runs' environment (CCL_WORKER_COUNT in the job
  log) or oneCCL's CCL_LOG_LEVEL=info line "unsupported count of workers";
- the text length: unrecorded (331 inferred from D1's memory, 1,024 the cap); decided by the
  runs' token counts per batch;
- FSDP1's flat-parameter path (all-gather into a FlatParameter, copy-out, limit_all_gathers'
  rate limiter) against the FSDP2-shaped model: decided by a profile of one step (host time in
  xccl:_allgather_base and the copy kernels);
- the vision encoder of section D (unrecorded): decided by the run's config.
"""

from __future__ import annotations

import pytest

from prism_strategy.bench.fit.published import load_published
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.strategies import get_strategy

D1 = {r.id: r for r in load_published("aurora-prism")}["D1"]
MEASURED = 7.3
"""D1: samples/s (PRISM scaling_study.md, section D)."""
CAP_TOKENS = 1024 + 196
"""The runs' text cap plus SigLIP2's 196 image tokens."""
GAP_INFERRED, GAP_CAP = 6.8, 2.8
"""Known gap, predicted / measured samples/s: at the inferred text length and at the cap."""
TOLERANCE = 0.1
"""The published figure's one decimal and the model's rounding: 10% of the gap."""


def _predicted(**override) -> float:
    kw = D1.scenario_kwargs() | override
    return evaluate(scenario_from_flags(**kw), get_strategy(D1.planner_strategy)).samples_per_s


@pytest.mark.xfail(strict=True, reason="known gap: 6.8x too fast (2.8x at the 1,024 cap), record D1")
def test_section_d_7b_fsdp1_throughput_within_a_third():
    assert _predicted() / MEASURED <= 1.33


def test_section_d_gap_stays_within_its_stated_size():
    inferred = _predicted() / MEASURED
    cap = _predicted(seq_len=CAP_TOKENS) / MEASURED
    assert inferred == pytest.approx(GAP_INFERRED, rel=TOLERANCE)
    assert cap == pytest.approx(GAP_CAP, rel=TOLERANCE)
