"""The CUDA presets against the published single-node runs (data/measurements/cuda-published.toml).

For every record: measured tokens/s per GPU; predicted before the fit (the former model: one 0.4
fraction for every FLOP), after (the shipped presets' compute terms) and by a refit now; each
error, and the leave-one-out error (refit without the record). Records kept out of the fit are
shown as checks with the reason. Then llm-foundry's MFU beside the same MFU computed from the
measured and the predicted tokens/s, the fitted knobs, what the rows cannot decide, the
coverage of plan's 80% ranges on the leave-one-out rows (symmetric, and with the one-sided scale
terms plan states), and TT-01's setup at 8, 64 and 512 GPUs as plan predicts it, with its range.

Run: PYTHONPATH=src .venv/bin/python benchmarks/cuda_fit.py [--json] [--write]
--write stores the error summary plan's ranges read (src/prism_strategy/data/fits/cuda-published.toml).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

from prism_strategy.bench.fit import cuda_fit as cf
from prism_strategy.bench.fit.published import load_published
from prism_strategy.specs.presets import load_model, load_platform

FITS = Path(__file__).resolve().parents[1] / "src" / "prism_strategy" / "data" / "fits" / "cuda-published.toml"
CANNOT_DECIDE = [
    "gemm_half_dim: every row's smallest matmul dimension is 1024-4096; kept at the assumed 128",
    "the 500 W cap vs the torchtitan stack: every TT row is both, every MF row neither",
    "Ampere's attention and elementwise terms: every A100 row is eager llm-foundry at seq 2048 (shared with Hopper)",
    "the attention ratio rests on MF-09 (seq 65536) almost alone: its leave-one-out error shows it",
    "anything across nodes: every row is one node; communication beyond it is the comm model's",
]


def llm_foundry_mfu(model: str, seq: int, tok_s: float, peak_tflops: float) -> float:
    """llm-foundry's MFU: (6 x params + 12 x layers x hidden x seq) x tokens/s per GPU / peak."""
    m = load_model(model)
    return (6 * m.total_params + 12 * m.layers * m.hidden * seq) * tok_s / (peak_tflops * 1e12)


def rows() -> dict:
    records = load_published(cf.MEASUREMENTS)
    shipped = {n: load_platform(n) for n in cf.PLATFORMS}
    before = {n: cf.before_platform(p) for n, p in shipped.items()}
    fitted_records = [r for r in records if cf.fit_reason(r) is None]
    obs = {r.id: cf.record_observation(r) for r in records if r.step_time_s()}
    fit_obs = [obs[r.id] for r in fitted_records]
    refit = cf.fit(cf.PRIORS, fit_obs, shipped)
    loo = cf.leave_one_out(cf.PRIORS, fit_obs, shipped)
    refit_p = {n: cf.apply(p, refit) for n, p in shipped.items()}
    out = []
    for r in records:
        if r.id not in obs:
            continue
        o, s = obs[r.id], r.scenario
        tokens = s.micro_batch * s.grad_accum * s.seq_len
        row = {
            "id": r.id,
            "platform": r.platform,
            "model": s.model,
            "seq": s.seq_len,
            "measured_tok_s": tokens / o.measured,
            "measured_s": o.measured,
            "fitted": cf.fit_reason(r) is None,
            "why_not": cf.fit_reason(r),
            "loo_err_pct": loo.get(r.id),
            "mfu_reported": r.measured.mfu,
        }
        for k, plats in (("before", before), ("after", shipped), ("refit", refit_p)):
            row[f"{k}_s"] = o.predict(plats[r.platform])
            row[f"{k}_tok_s"] = tokens / row[f"{k}_s"]
            row[f"{k}_err_pct"] = 100 * (row[f"{k}_s"] / o.measured - 1)
        if r.measured.mfu is not None:
            peak = shipped[r.platform].hardware.peak_tflops_bf16
            row["mfu_from_measured"] = llm_foundry_mfu(s.model, s.seq_len, row["measured_tok_s"], peak)
            row["mfu_from_predicted"] = llm_foundry_mfu(s.model, s.seq_len, row["after_tok_s"], peak)
        out.append(row)
    fit_rows = [x for x in out if x["fitted"]]
    inside, n = cf.range_coverage(loo)
    inside_now, _ = cf.range_coverage(loo, {r.id: slow_extra(r) for r in fitted_records})
    half_dim = {}
    for d in (32.0, 512.0):  # what the rows say about the matmul half-dimension: refit at other values
        plats = {
            k: p.with_values(compute_terms=dataclasses.replace(p.compute.compute_terms, gemm_half_dim=d))
            for k, p in shipped.items()
        }
        half_dim[d] = cf.median_abs(cf.errors(cf.fit(cf.PRIORS, fit_obs, plats), fit_obs, plats))
    summary = {
        "fitted_records": len(fit_rows),
        "median_abs_err_before_pct": cf.median_abs({x["id"]: x["before_err_pct"] for x in fit_rows}),
        "median_abs_err_after_pct": cf.median_abs({x["id"]: x["after_err_pct"] for x in fit_rows}),
        "median_abs_err_loo_pct": cf.median_abs(loo),
        "range_coverage_loo": [inside, n],
        "range_coverage_loo_one_sided": [inside_now, n],
        "refit_values": refit,
        "shipped_values": cf.shipped_knobs(shipped),
        "cannot_decide": CANNOT_DECIDE,
        "gpu_spread": cf.gpu_spread(refit),
        "median_abs_err_refit_at_half_dim_pct": half_dim,
    }
    max_nodes = {p: max((r.scenario.nodes for r in fitted_records if r.platform == p), default=1) for p in cf.PLATFORMS}
    return {
        "rows": out,
        "summary": summary,
        "loo": loo,
        "max_nodes": max_nodes,
        "prior": {x["id"]: x["before_err_pct"] for x in fit_rows},
        "scale": scale_rows(records),
    }


def _evaluate(r, **over):
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.planning.planner import evaluate
    from prism_strategy.strategies import get_strategy

    return evaluate(scenario_from_flags(**(r.scenario_kwargs() | over)), get_strategy(r.planner_strategy))


def slow_extra(r) -> float:
    """ln widening of a record's slow side beyond the fit's (0 at the nodes the fit measured)."""
    o = _evaluate(r)
    return o.range.slow - o.range.fast if o.range else 0.0


SCALE_GPUS = (8, 64, 512)


def scale_rows(records) -> list[dict]:
    """TT-01's setup (Llama 3.1 8B, FSDP2, seq 8192, local batch 2, selective checkpointing, 500 W H100)
    at 8, 64 and 512 GPUs: predicted tokens/s per GPU, its range and what the slow side is made of.
    Predictions only: no multi-node row is in the fit, and the published multi-node runs are held aside."""
    tt = next(r for r in records if r.id == "TT-01")
    out = []
    for gpus in SCALE_GPUS:
        nodes = gpus // tt.scenario.ranks_per_node
        o = _evaluate(tt, nodes=nodes, global_batch=tt.scenario.micro_batch * gpus)
        per = o.tokens_per_s_per_device / o.samples_per_s
        out.append(
            {
                "gpus": gpus,
                "nodes": nodes,
                "tok_s_per_gpu": o.tokens_per_s_per_device,
                "tok_s_per_gpu_range": [x * per for x in o.samples_per_s_range],
                "exposed_comm_s": o.exposed_comm_s,
                "comm_s": o.comm_s,
                "compute_s": o.compute_s,
                "step_s": o.step_time_s,
                "range_terms": {"fit": o.range.fast} | o.range.terms,
            }
        )
    return out


def _print_scale(rows: list[dict]) -> None:
    print("\nat scale (TT-01's setup on h100-96gb-500w, predicted; the range's low side carries the scale terms):")
    print(
        f"{'GPUs':>5s} {'tok/s/GPU':>9s} {'vs 8':>6s} {'range tok/s/GPU':>17s} {'-/+%':>9s}  slow side beyond the fit (x)"
    )
    ref = rows[0]["tok_s_per_gpu"]
    for x in rows:
        lo, hi = x["tok_s_per_gpu_range"]
        v = x["tok_s_per_gpu"]
        terms = ", ".join(f"{k} {math.exp(w):.2f}" for k, w in x["range_terms"].items() if k != "fit") or "-"
        print(
            f"{x['gpus']:5d} {v:9.0f} {v / ref - 1:+6.1%} {lo:8.0f}-{hi:<8.0f} -{1 - lo / v:.0%}/+{hi / v - 1:.0%}  {terms}"
        )


def _print(d: dict) -> None:
    print("tokens/s per GPU; err% = predicted / measured step time - 1 (negative: predicted too fast)")
    print(
        f"{'record':7s} {'platform':15s} {'model':12s} {'seq':>6s} {'meas tok/s':>10s} {'before':>7s} {'err%':>5s} "
        f"{'after':>7s} {'err%':>5s} {'LOO%':>5s}  fit"
    )
    for x in d["rows"]:
        loo = f"{x['loo_err_pct']:+5.0f}" if x["fitted"] else "     "
        print(
            f"{x['id']:7s} {x['platform']:15s} {x['model']:12s} {x['seq']:6d} {x['measured_tok_s']:10.0f} "
            f"{x['before_tok_s']:7.0f} {x['before_err_pct']:+5.0f} {x['after_tok_s']:7.0f} {x['after_err_pct']:+5.0f} "
            f"{loo}  {'yes' if x['fitted'] else 'no: ' + x['why_not'][:20]}"
        )
    s = d["summary"]
    print(
        f"\nmedian |step error| on {s['fitted_records']} fitted records: before {s['median_abs_err_before_pct']:.1f}%, "
        f"after {s['median_abs_err_after_pct']:.1f}%, leave-one-out {s['median_abs_err_loo_pct']:.1f}%"
    )
    print(
        f"80% ranges on the leave-one-out rows: {s['range_coverage_loo'][0]} of {s['range_coverage_loo'][1]} inside "
        f"(symmetric); {s['range_coverage_loo_one_sided'][0]} of {s['range_coverage_loo_one_sided'][1]} with the "
        "one-sided scale terms plan states"
    )
    print("\nllm-foundry MFU (their count: 6 x params + 12 x layers x hidden x seq per token, causal half not taken):")
    print(f"{'record':7s} {'reported':>9s} {'from measured tok/s':>20s} {'from predicted tok/s':>21s}")
    for x in d["rows"]:
        if x.get("mfu_reported") is not None:
            print(
                f"{x['id']:7s} {x['mfu_reported']:9.1%} {x['mfu_from_measured']:20.1%} {x['mfu_from_predicted']:21.1%}"
            )
    print("\nfitted values (shipped -> refit now):")
    for k, v in s["shipped_values"].items():
        print(f"  {k:26s} {v:8.4g} -> {s['refit_values'][k]:8.4g}")
    print("\nwhat these rows cannot decide:")
    for line in s["cannot_decide"]:
        print(f"  - {line}")
    alt = ", ".join(f"{d:g}: {v:.1f}%" for d, v in s["median_abs_err_refit_at_half_dim_pct"].items())
    print(
        f"    (refit with gemm_half_dim at {alt} median fitted error, vs {s['median_abs_err_after_pct']:.1f}% at 128)"
    )
    _print_scale(d["scale"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", action="store_true", help=f"store the error summary plan's ranges read ({FITS.name})")
    args = ap.parse_args()
    d = rows()
    if args.write:
        FITS.parent.mkdir(exist_ok=True)
        cf.write_fit_errors(
            str(FITS),
            measurements=cf.MEASUREMENTS,
            writer="benchmarks/cuda_fit.py",
            device="cuda",
            loo_pct=d["loo"],
            prior_pct=d["prior"],
            max_nodes=d["max_nodes"],
            spread=d["summary"]["gpu_spread"],
        )
    if args.json:
        json.dump({k: d[k] for k in ("rows", "summary", "scale")}, sys.stdout, indent=2)
        return
    _print(d)


if __name__ == "__main__":
    main()
