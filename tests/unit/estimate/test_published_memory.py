"""Published memory records held against the memory model (issue 20 item 3, issue 17).

Each case is one published figure: the counter it measured (allocated = max_memory_allocated;
active = the allocator's active bytes, about the same; reserved = max_memory_reserved; oom = the
run died; ran = it fitted, no figure), the tolerance the measurement supports, and, where the
scenario is uncertain, why. Records the model still misses are xfail(strict=True) with the gap
and its size: the suite fails when one starts passing, so the xfail comes off with the fix, and
test_*_gap_stays_within_its_stated_size fails when it widens past its size + PEAK_TOLERANCE.

Out of sample (issue 29): each record is predicted on the presets refitted without it
(tests/unit/_holdout.py refit_memory_without: the allocator's fixed-shape factor without TT-18 /
TT-20, its varying-shape factor without C6-b2 / C6-b3, its pinned factor without C6-b4, section
D's text length from D4 when D1 is the record).

Sources: data/measurements/aurora-prism.toml (PRISM, via ../shared/data/aurora_measurements.md)
and data/measurements/cuda-published.toml (torchtitan benchmarks/llama3_h100_202412_torchtitan.md
and PR #165; llm-foundry scripts/train/benchmarking/README.md; via
../shared/data/cuda_measurements.md). PRISM's trainer logs peak_gb = torch.xpu.max_memory_allocated() / 1e9
on rank 0, never reset, so the run's maximum so far (AI-ModCon/PRISM src/training/trainer_native.py at
d1fd3d3c2b3e8df03e3dae68e04358262808608f, the [MEMORY] Peak line): a PRISM "peak" is allocated, in 10^9
bytes (the file's memory_unit_bytes); torchtitan logs max_reserved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from _holdout import known_gap, refit_memory_without

from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.memory_runtime import runtime_memory
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs.cluster import GiB
from prism_strategy.strategies import get_strategy

PEAK_TOLERANCE = 0.10
"""PRISM pads each batch to its longest sample and torchtitan logs a peak over steps: one
reported figure, read to +-10%."""


@dataclass(frozen=True)
class Case:
    id: str
    counter: str
    """allocated | reserved | oom | ran | oom_at_step (died at optimizer.step)."""
    gap: str | None = None
    """Why the model misses it: the case is xfail(strict=True)."""
    stated: float | None = None
    """The gap's size today: predicted / measured - 1 (oom: at the limit / usable - 1)."""
    note: str = ""
    """Where the scenario or the counter is uncertain."""


AURORA = {r.id: r for r in load_published("aurora-prism")}

AURORA_CASES = [
    Case(
        "A4",
        "allocated",
        stated=-0.573,
        gap="predicted 15.1 GiB allocated vs 35.3 (37.9 GB, -57%, local batch 8) at the start "
        "of backward at 512 text tokens; the upcast loss (9.6 GiB at 12 bytes per logit: 8 x 708 tokens x 151,936 "
        "vocab) is the largest item. PRISM's source (d1fd3d3c): the loss is the upcast kernel (F.cross_entropy on "
        "bf16 logits under the trainer's autocast, whose log_softmax runs in fp32), and the trainer holds the bf16 "
        "logits through backward: +2 bytes/logit = +1.6 GiB, unmodelled. The 512 is the shared table's: PRISM's "
        "collator truncates at MAX_SEQ_LENGTH (default 2048) and pads to the batch's longest, and peak_gb is the "
        "run's maximum; the model meets 35.3 GiB at 1949 text tokens. Deciding needs the run's cap and longest batch "
        "(benchmarks/allocator_fit.py)",
    ),
    Case(
        "B1",
        "allocated",
        stated=-0.584,
        gap="predicted 11.2 GiB vs 27.0 (29.0 GB, -59%); projector-only, the same loss buffers as "
        "A4 (9.6 GiB, +1.6 GiB for the kept logits); the model meets 27.0 GiB at 1633 text tokens, under the "
        "collator's default cap (2048); the e2e - projector difference is 8.9 GB measured vs 4.2 GB predicted",
    ),
    Case(
        "C6-b2",
        "reserved",
        stated=-0.146,
        gap="the varying-shape factor from C6-b3 alone is 0: predicted 27.4 GiB reserved vs 32.1 (34.5 GB); "
        "the record gives one figure for batch 2 and 3, which a term growing with the batch cannot meet both ways "
        "(benchmarks/allocator_fit.py)",
    ),
    Case(
        "C6-b3",
        "reserved",
        stated=0.296,
        gap="the varying-shape factor from C6-b2 alone (0.42): predicted 41.6 GiB reserved vs 32.1 (34.5 GB), as C6-b2",
    ),
    Case(
        "C6-b2-allocated",
        "allocated",
        stated=0.907,
        gap="predicted 24.2 GiB allocated vs 12.7 (13.6 GB, +91%): the same 13.6 "
        "for batch 2 and 3 reads like a current figure after the step (frozen params 13.0 GiB), not a peak",
    ),
    Case(
        "C6-b4",
        "oom",
        stated=-0.389,
        gap="predicted to fit: 37.2 GiB at the limit (35.2 allocated + 2.0 runtime; no pinned "
        "slivers, C6-b4 being the pinned factor's only record) vs 60.8 usable, where the run died with 55.3 GiB (59.4 GB) allocated: the allocated model is "
        ">= 20 GiB short at batch 4 (no batch-linear allocation meets both C6-b2's 32.1 reserved and this 55.3), "
        "unexplained like A4/B1",
    ),
    Case(
        "D1",
        "allocated",
        note="section D's longest text is inferred from D1's 50.5 GB (331 tokens, under the runs' cap of 1024: "
        "--max-seq-length 1024 in PRISM's docs/results/scaling_study.md; benchmarks/allocator_fit.py "
        "infer_seq_len), so shipped it agrees by construction; held out, the length comes from D4 (292 tokens) "
        "and D1 is predicted 44.0 GiB vs 47.0 (-6.4%)",
    ),
    Case(
        "D2",
        "allocated",
        stated=0.168,
        gap="compiled (estimate/memory_compile.py): predicted 35.9 GiB vs 30.7 (33.0 GB, +17%) "
        "at the inferred 331 text tokens: the partitioner terms save 11.1 GiB where PRISM's compile saved 16.3 "
        "(D1 -> D2; benchmarks/compile_memory_fit.py)",
    ),
    Case("D3", "allocated", stated=0.169, gap="compiled: predicted 50.8 GiB vs 43.4 (46.6 GB), as D2"),
    Case(
        "D4", "allocated", note="held out of the length inference (D1): 45.3 GiB predicted vs 39.3-45.4 (42.2-48.7 GB)"
    ),
    Case("D3-b32", "oom", note="agrees; compile's saving on PRISM's stack is under-predicted (D2)"),
    Case(
        "D4-b20",
        "oom",
        note="held out of the length inference: 63.1 GiB at the limit (55.5 allocated + pinned "
        "slivers + 2.0 runtime) vs 60.8 usable",
    ),
    Case(
        "D5",
        "oom_at_step",
        note="died at optimizer.step with 62.81 GB (58.5 GiB) allocated: the figure at failure "
        "is a lower bound of the step's need",
    ),
    Case(
        "E1",
        "allocated",
        stated=-0.181,
        gap="compiled with the loss (estimate/memory_compile.py): 36.1 GiB allocated vs 44.0 "
        "(-18%); torchtitan logs max_reserved, so 44 GiB reads as reserved: predicted 46.6 (+6%) with the "
        "fixed-length allocator terms",
    ),
]


def _aurora_memory(rid: str):
    r = AURORA[rid.removesuffix("-allocated")]
    sc = scenario_from_flags(**refit_memory_without(r.id).kwargs(r.id))
    return r, sc, evaluate(sc, get_strategy(r.planner_strategy))


def _within(predicted: float, measured: float | tuple[float, float]) -> bool:
    lo, hi = measured if isinstance(measured, tuple) else (measured, measured)
    return (1 - PEAK_TOLERANCE) * lo <= predicted <= (1 + PEAK_TOLERANCE) * hi


def _marks(c: Case):
    if not c.gap:
        return []
    assert c.stated is not None, f"{c.id}: a gap states its size"
    return [pytest.mark.xfail(strict=True, reason=known_gap(f"{c.stated:+.1%} {c.counter}: {c.gap}", c.id))]


def _error(c: Case, r, sc, o) -> float:
    """predicted / measured - 1 of the case's counter (oom: at the limit / usable - 1)."""
    rt = runtime_memory(o.memory, sc.platform, sc.training)
    if c.counter == "oom":
        return o.memory_runtime["memory_at_limit_gib"] * GiB / sc.platform.usable_bytes - 1
    if c.counter == "reserved":
        return rt.reserved / r.peak_bytes("reserved") - 1
    kind = "active" if c.counter == "active" else ("peak" if r.measured.peak_gb is not None else "allocated")
    return rt.allocated / r.peak_bytes(kind) - 1


def _assert_gap_within_stated(c: Case, r, sc, o) -> None:
    """In log space (a -57% gap widening to -66% is 0.23 in ln, past the 10% tolerance's 0.095)."""
    err = _error(c, r, sc, o)
    today, stated = math.log1p(err), math.log1p(c.stated)
    assert (today > 0) is (stated > 0) and abs(today) <= abs(stated) + math.log1p(PEAK_TOLERANCE), (c.id, err)


@pytest.mark.out_of_sample
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in AURORA_CASES if c.gap])
def test_aurora_gap_stays_within_its_stated_size(case: Case):
    _assert_gap_within_stated(case, *_aurora_memory(case.id))


@pytest.mark.out_of_sample
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in AURORA_CASES])
def test_aurora_record(case: Case):
    r, sc, o = _aurora_memory(case.id)
    rt = runtime_memory(o.memory, sc.platform, sc.training)
    m = r.measured
    if case.counter == "oom":
        assert not o.feasible, f"{case.id}: predicted to fit at {o.memory.total / GiB:.1f} GiB"
    elif case.counter == "oom_at_step":
        assert not o.feasible and o.memory.moment == "optimizer step", (o.memory.moment, o.why_not)
        assert rt.allocated >= r.peak_bytes("allocated")
    elif case.counter == "reserved":
        assert _within(rt.reserved, r.peak_bytes("reserved")), f"{case.id}: {rt.reserved / GiB:.1f} GiB reserved"
    else:
        peak = m.peak_gb if m.peak_gb is not None else m.peak_allocated_gb
        unit = r.memory_unit_bytes
        measured = tuple(x * unit for x in peak) if isinstance(peak, tuple) else peak * unit
        assert o.feasible and _within(rt.allocated, measured), f"{case.id}: {rt.allocated / GiB:.1f} GiB allocated"


def test_prism_7b_ddp_on_one_aurora_node_dies_at_the_optimizer_step():
    """Issue 17: PRISM found OLMo-3 7B end-to-end under DDP does not fit one Aurora node (section D
    runs FSDP instead). Every rank holds bf16 params, grads and both moments (54.4 GiB) and
    foreach AdamW's _foreach_sqrt of the second moment (13.8 GiB) at the step."""
    sc = scenario_from_flags(
        "olmo-3-7b",
        vision="siglip2-base-patch16-224",
        platform="aurora",
        nodes=1,
        seq_len=1024,
        micro_batch=1,
        global_batch=12,
        ckpt_freq=1,
        precision="bf16-pure",
    )
    o = evaluate(sc, get_strategy("ddp"))
    assert not o.feasible and o.memory.moment == "optimizer step", (o.memory.moment, o.why_not)


# --- CUDA single-node rows: data/measurements/cuda-published.toml -----------------------------
CUDA = {r.id: r for r in load_published("cuda-published")}

CUDA_CASES = [
    Case("TT-18", "active", note="FSDP1 FULL_SHARD, modelled as FSDP2 (bf16 gathers either way)"),
    Case("TT-20", "active"),
    Case(
        "TT-20-reserved",
        "reserved",
        note="in the CUDA allocator fit (TT-18, TT-20: factor 0.30); held out, the factor from TT-18 "
        "alone (0.35) puts the predicted reserved +3.7% off",
    ),
    Case(
        "TT-01",
        "reserved",
        note="held out of the CUDA allocator fit (TT-18, TT-20): seq 8192, Llama 3.1 8B, "
        "run with expandable segments (torchtitan 9dec370's run_llama_train.sh): 86.7 GiB vs 82.4",
    ),
    Case(
        "TT-02",
        "reserved",
        note="compiled SAC (estimate/memory_compile.py): the o_proj / down outputs SAC "
        "caches are not kept by the compiled graph",
    ),
    Case(
        "TT-21",
        "reserved",
        stated=-0.147,
        gap="compiled full checkpointing: 24.7 GiB reserved vs 28.9 (-15%); compile changes "
        "almost nothing there, and the eager pair (PR #165 FSDP2 AC, 31.02 GiB reserved) is itself predicted "
        "-20%: the allocator's cache under full checkpointing (issue 17 item 5), not compile",
    ),
    Case("TT-22", "reserved", note="compiled SAC, as TT-02"),
    Case(
        "TT-23",
        "reserved",
        stated=0.101,
        gap="compiled SAC at local batch 16: 97.1 GiB reserved vs 88.2 (+10.1%); allocated "
        "76.9 + the CUDA 0.30 cache of 69 GiB transient: at 93% of the device the cache is smaller (item 5)",
    ),
    Case(
        "TT-24",
        "ran",
        note="compiled, no checkpointing, at 95% of the device: fits only with compile's "
        "recomputed upcasts and act(gate) (85.4 GiB allocated)",
    ),
    Case(
        "MF-06",
        "ran",
        note="llm-foundry's fused cross-entropy (--loss fused); judged at the limit (72.4 of 77.6 "
        "GiB): unpressed, the fixed-shape cache would put reserved at 90.7, which the flush and retry releases",
    ),
    Case("MF-08", "ran"),
    Case("MF-09", "ran"),
    Case("MF-13", "ran", note="as MF-06 on A100 80 GB: 75.5 GiB at the limit of 77.6, 93.8 unpressed"),
    Case("MF-15", "ran", note="bf16 PURE: bf16 reduce, fp32 master and state as the record stores it"),
    Case("MF-17", "ran"),
]


def _cuda_memory(rid: str):
    r = CUDA[rid.removesuffix("-reserved")]
    sc = scenario_from_flags(**refit_memory_without(r.id).kwargs(r.id))
    return r, sc, evaluate(sc, get_strategy(r.planner_strategy).with_options(reduce_dtype=r.scenario.reduce_dtype))


@pytest.mark.out_of_sample
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CUDA_CASES if c.gap])
def test_cuda_gap_stays_within_its_stated_size(case: Case):
    _assert_gap_within_stated(case, *_cuda_memory(case.id))


@pytest.mark.out_of_sample
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CUDA_CASES])
def test_cuda_record(case: Case):
    r, sc, o = _cuda_memory(case.id)
    rt = runtime_memory(o.memory, sc.platform, sc.training)
    if case.counter == "ran":
        assert o.feasible, f"{case.id}: {o.why_not}"
        return
    predicted = rt.reserved if case.counter == "reserved" else rt.allocated
    measured = r.peak_bytes(case.counter)
    assert _within(predicted, measured), f"{case.id}: predicted {predicted / GiB:.1f} GiB vs {measured / GiB:.1f}"
