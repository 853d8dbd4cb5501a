"""The caching allocator's terms (estimate/memory_runtime.py, issue 17 item 5): fitted on the records
with both counters, leave-one-out where a term has two records, held-out checks, and what the
records cannot decide. Also the sequence length section D did not record, inferred from D1.

- fixed-shape factor: (reserved - active) = factor x predicted transient (activations and buffers)
  on torchtitan PR #165 TT-18 (FSDP1) and TT-20 (FSDP2), 8 H100 96 GB, fixed-length, SAC, no
  expandable segments; the measured active figure isolates the allocator from the allocated model.
- varying-shape factor: PRISM C6-b2 / C6-b3 (Aurora, one reserved figure for both): reserved -
  predicted allocated - fixed-shape term = factor x predicted per-sample activations; the XPU
  allocator is taken to share CUDA's fixed-shape factor (device-only assumption).
- pinned factor: C6-b4's reserved - allocated at the failure (62.1 - 59.4 GB: what the flush and
  retry left) per byte of predicted per-sample activations at batch 4. One record: no leave-one-out.
  PRISM figures are GB = 10^9 bytes (its trainer divides by 1e9: src/training/trainer_native.py).
- section D's text length: the length at which D1's predicted allocated peak equals its 50.5 GB
  (in-sample: D1); D4 (range), D4-b20 (out of memory) and the 2-node ceiling check it.

Run: PYTHONPATH=src python benchmarks/allocator_fit.py
"""

from __future__ import annotations

from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.memory_runtime import transient_bytes
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs.cluster import GiB
from prism_strategy.strategies import get_strategy

RECORDS = {r.id: r for name in ("cuda-published", "aurora-prism") for r in load_published(name)}


def option(rid: str, platform=None, **changes):
    r = RECORDS[rid]
    kw = r.scenario_kwargs() | changes | ({"platform": platform} if platform is not None else {})
    s = get_strategy(r.planner_strategy)
    if r.scenario.reduce_dtype:
        s = s.with_options(reduce_dtype=r.scenario.reduce_dtype)
    sc = scenario_from_flags(**kw)
    return sc, evaluate(sc, s)


def allocated(o) -> float:
    return o.memory.total - o.memory.reserve


def through_origin(pts: list[tuple[float, float]]) -> float:
    """Least squares y = f x."""
    return max(0.0, sum(x * y for x, y in pts) / sum(x * x for x, _ in pts))


def fixed_fit() -> tuple[float, list[str]]:
    pts, lines = {}, []
    for rid in ("TT-18", "TT-20"):
        r, (_, o) = RECORDS[rid], option(rid)
        act, res, t = r.peak_bytes("active"), r.peak_bytes("reserved"), transient_bytes(o.memory)
        pts[rid] = (t, res - act, act, res)
        lines.append(
            f"  {rid}: active {act / GiB:.2f}, reserved {res / GiB:.2f}, predicted allocated "
            f"{allocated(o) / GiB:.2f}, transient {t / GiB:.2f} GiB: (reserved - active) / transient "
            f"{(res - act) / t:.3f}"
        )
    f = through_origin([(t, y) for t, y, *_ in pts.values()])
    lines.append(f"  fitted fixed-shape factor {f:.3f}")
    for rid, (t, _, act, res) in pts.items():
        fo = through_origin([(tt, yy) for k, (tt, yy, *_) in pts.items() if k != rid])
        lines.append(f"  leave-one-out {rid}: factor {fo:.3f}, reserved {100 * ((act + fo * t) / res - 1):+.1f}%")
    return f, lines


def xpu(churn: float, varying: float = 0.0, pinned: float = 0.0):
    from prism_strategy.specs.presets import load_platform

    return load_platform("aurora").with_values(
        allocator_cache_factor=churn, allocator_varying_factor=varying, allocator_pinned_factor=pinned
    )


def varying_fit(churn: float) -> tuple[float, list[str]]:
    pts, lines = {}, []
    for rid in ("C6-b2", "C6-b3"):
        r, (_, o) = RECORDS[rid], option(rid, platform=xpu(churn))
        res, a, t, act = r.peak_bytes("reserved"), allocated(o), transient_bytes(o.memory), o.memory.activations
        pts[rid] = (act, res - a - churn * t, a + churn * t, res)
        lines.append(
            f"  {rid}: reserved {res / GiB:.1f}, predicted allocated {a / GiB:.2f} + fixed-shape "
            f"{churn * t / GiB:.2f}, per-sample activations {act / GiB:.2f} GiB"
        )
    f = through_origin([(x, y) for x, y, *_ in pts.values()])
    lines.append(f"  fitted varying-shape factor {f:.3f} (both records)")
    for rid, (x, _, base, res) in pts.items():
        fo = through_origin([(xx, yy) for k, (xx, yy, *_) in pts.items() if k != rid])
        lines.append(f"  leave-one-out {rid}: factor {fo:.3f}, reserved {100 * ((base + fo * x) / res - 1):+.1f}%")
    return f, lines


def pinned_fit(churn: float) -> tuple[float, list[str]]:
    r, (_, o) = RECORDS["C6-b4"], option("C6-b4", platform=xpu(churn))
    left = r.peak_bytes("reserved") - r.peak_bytes("allocated")
    f = left / o.memory.activations
    return f, [
        f"  C6-b4 at the failure: reserved - allocated {left / GiB:.1f} GiB over predicted per-sample "
        f"activations {o.memory.activations / GiB:.1f} GiB: pinned factor {f:.3f} (one record, no "
        f"leave-one-out); predicted allocated {allocated(o) / GiB:.1f} vs {r.peak_bytes('allocated') / GiB:.1f} "
        "at the failure: the allocated model misses C6-b4 (see the gaps)"
    ]


def infer_seq_len(rid: str = "D1") -> int:
    """Text length at which the record's predicted allocated peak meets its measured peak (bisection
    up to 4096, past the runs' cap of 1024, so the cap is a check, not a bound of the search)."""
    return length_meeting(rid)


def slope_bound_seq_len() -> tuple[float, int]:
    """D2 / D3 (compiled, 1 node, batch 16 / 24): their per-sample slope is free of the static part.
    Compile can only free tensors, so the eager model's slope at the true length is at least this:
    the shortest text length whose eager per-sample bytes reach it bounds D's length from below."""
    d2, d3 = RECORDS["D2"], RECORDS["D3"]
    slope = (d3.peak_bytes("peak") - d2.peak_bytes("peak")) / (d3.scenario.micro_batch - d2.scenario.micro_batch)
    lo, hi = 16, 1024
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if option("D1", seq_len=mid)[1].memory.per_sample < slope else (lo, mid)
    return slope, hi


def d4_rank_lengths() -> tuple[int, int]:
    """D4's peak is a range (42.2-48.7 GB, over ranks or runs): the text lengths at which the model
    meets each end, read as the spread of the ranks' longest batches (lengths vary per rank)."""
    out = []
    for gb in RECORDS["D4"].measured.peak_gb:
        target, lo, hi = gb * RECORDS["D4"].memory_unit_bytes, 16, 1024
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if allocated(option("D4", seq_len=mid)[1]) < target else (lo, mid)
        out.append(lo)
    return out[0], out[1]


def length_meeting(rid: str, hi: int = 4096) -> int:
    """Text length at which the record's predicted allocated peak meets its measured peak (bisection)."""
    target, lo = RECORDS[rid].peak_bytes("peak"), 16
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if allocated(option(rid, seq_len=mid)[1]) < target else (lo, mid)
    return lo


def unexplained() -> list[str]:
    """A4 and B1 (PRISM peak_gb = rank 0's torch.xpu.max_memory_allocated() / 1e9 since the start of
    the run: AI-ModCon/PRISM src/training/trainer_native.py at d1fd3d3c): the gap and what PRISM's
    source says about it. The loss is the upcast kernel (src/decoders/lm_head.py F.cross_entropy on
    bf16 logits under the trainer's torch.autocast: autocast's log_softmax runs in fp32,
    aten/src/ATen/autocast_mode.h AT_FORALL_FP32_SET_OPT_DTYPE), and the trainer keeps `logits`
    alive through backward: +2 bytes per logit over the model's 12. The text length: the collator
    truncates at MAX_SEQ_LENGTH (default 2048) and pads each batch to its longest sample; the
    records' 512 is the shared table's, not in PRISM's report of these runs."""
    out = []
    for rid in ("A4", "B1"):
        r, (sc, o) = RECORDS[rid], option(rid)
        measured = r.peak_bytes("peak")
        logits = (
            r.scenario.micro_batch * (sc.training.seq_len + (sc.training.image_tokens or 196)) * sc.model.backbone.vocab
        )
        gap = measured - allocated(o)
        out.append(
            f"  {rid} (local batch {r.scenario.micro_batch}): measured {measured / GiB:.1f}, predicted allocated "
            f"{allocated(o) / GiB:.1f}, unpressed reserved {o.memory_runtime['memory_reserved_gib']:.1f} GiB; "
            f"gap {gap / GiB:.1f} GiB ({logits / 1e6:.0f}M logits at {sc.training.seq_len} text tokens)"
        )
        out.append(f"    the trainer's bf16 logits kept through backward (+2 B/logit): {2 * logits / GiB:.1f} GiB")
        out.append(
            f"    the model meets the measurement at {length_meeting(rid)} text tokens (+196 image), under "
            "the collator's default cap of 2048: the runs' cap and longest batch are not recorded"
        )
    out.append(
        "  to decide: the runs' MAX_SEQ_LENGTH and the longest padded batch rank 0 saw ([SEQ_LEN] log lines), "
        "torch.xpu.memory_stats"
    )
    return out


def checks() -> list[str]:
    out = []
    sc, o = option("TT-01")
    rt = o.memory_runtime
    out.append(
        f"  TT-01 (held out; expandable segments; Llama 3.1 8B seq 8192): predicted reserved "
        f"{rt['memory_reserved_gib']:.1f} vs {RECORDS['TT-01'].peak_bytes('reserved') / GiB:.1f} GiB"
    )
    for rid in ("C6-b4", "D4-b20", "D3-b32"):
        sc, o = option(rid)
        out.append(
            f"  {rid} (ran out of memory): at the limit {o.memory_runtime['memory_at_limit_gib']:.1f} GiB vs "
            f"{sc.platform.usable_bytes / GiB:.1f} usable: predicted {'to fit' if o.feasible else 'out of memory'}"
        )
    sc, o = option("D4")
    lo, hi = (x * RECORDS["D4"].memory_unit_bytes / GiB for x in RECORDS["D4"].measured.peak_gb)
    out.append(
        f"  D4 (held out): predicted allocated {allocated(o) / GiB:.1f} vs {lo:.1f}-{hi:.1f} GB; "
        f"max micro-batch {o.max_micro_batch} (ran 16, 20 out of memory)"
    )
    for rid in ("MF-06", "MF-08", "MF-09", "MF-13", "MF-15", "MF-17"):
        sc, o = option(rid)
        rt = o.memory_runtime
        out.append(
            f"  {rid} (ran; memory not recorded): allocated {rt['memory_allocated_gib']:.1f}, unpressed "
            f"reserved+runtime {rt['memory_device_gib']:.1f}, at the limit {rt['memory_at_limit_gib']:.1f} of "
            f"{sc.platform.usable_bytes / GiB:.1f} GiB usable: {'fits' if o.feasible else 'DOES NOT FIT'}"
        )
    return out


CANNOT_DECIDE = """\
what these records cannot decide:
  - FSDP1 vs FSDP2: TT-18 and TT-20 differ only in the engine (0.350 vs 0.255); one factor for both.
  - checkpointing and sequence length in the fixed-shape term: both rows are SAC at seq 2048; the
    term scales with the transient (which holds the recomputed block), not checked at other settings.
  - how the varying-shape term follows the spread of lengths: PRISM's lengths were not recorded; C6
    gives one reserved figure for batch 2 and 3, which a term growing with the batch cannot meet both
    ways (leave-one-out above); and the XPU fixed-shape factor is CUDA's (C6 varies shapes).
  - whether any fixed-shape remainder is pinned at the limit: taken as released by the flush (MF-06
    and MF-13 ran where the unpressed reserved figure would exceed the device); C6-b4 alone gives the
    varying-shape pinned share.
  - expandable segments with varying lengths: no record; the varying term is taken as 0 with them."""


def main() -> None:
    churn, lines = fixed_fit()
    print("fixed-shape factor (CUDA, torchtitan PR #165):", *lines, sep="\n")
    varying, lines = varying_fit(churn)
    print("varying-shape factor (XPU, PRISM C6):", *lines, sep="\n")
    pinned, lines = pinned_fit(churn)
    print("pinned at the limit (XPU, PRISM C6-b4):", *lines, sep="\n")
    print(f"section D text length inferred from D1 (in-sample): {infer_seq_len('D1')} tokens (+196 image)")
    slope, bound = slope_bound_seq_len()
    lo, hi = d4_rank_lengths()
    print(
        f"  check (D2/D3, compiled): per-sample slope {slope / GiB:.2f} GiB; eager model reaches it at >= {bound} "
        f"tokens, a lower bound on D's length\n  D4's 42.2-48.7 GB range: the ranks' longest batches at "
        f"{lo}-{hi} text tokens by the model"
    )
    print("unexplained (allocated figures; the allocator terms do not enter):", *unexplained(), sep="\n")
    print("held-out checks with the shipped presets:", *checks(), sep="\n")
    print(CANNOT_DECIDE)


if __name__ == "__main__":
    main()
