"""Calibration on held-out configurations (CPU, gloo, 4 ranks as 2x2, small Llama).

Measures every strategy at (mb 2, seq 128) and (mb 4, seq 256), calibrates the cpu platform on
those, then predicts (mb 3, seq 192), never seen by the fit. Reports the median step-time and
peak-memory errors (targets 25% and 15%) and whether the prediction orders every pair of
strategies whose measured throughputs differ by more than 15% (plus the runs' own step-to-step
spread) the same way. Takes a few minutes; run it on a quiet machine.

Run: .venv/bin/python benchmarks/calibration_holdout.py [--db out/holdout.db]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from prism_strategy.bench.fit.calibrate import calibrate, errors_pct
from prism_strategy.bench.launch.run import run_many
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Store
from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.specs.presets import load_platform

STRATEGIES = ["ddp", "fsdp_full_shard", "fsdp_shard_grad_op", "hsdp_full_shard", "hsdp_shard_grad_op", "zero2"]
TRAIN, HELD = ((2, 128), (4, 256)), (3, 192)


def measure(store: Store):
    plat = load_platform("cpu")
    train, held = [], []
    for s in STRATEGIES:
        configs = [
            base_config(
                model="small-llama",
                nproc=4,
                ranks_per_node=2,
                micro_batch=mb,
                seq_len=seq,
                steps=5,
                warmup=2,
                precision="fp32",
                ckpt_freq=0,
                grad_accum=1,
                timeout_s=300,
            )
            | {"strategy": s}
            for mb, seq in (*TRAIN, HELD)
        ]
        runs = run_many(configs, plat, store)
        bad = [r for r in runs if r.status != "ok"]
        if bad:
            raise SystemExit(f"{s}: {bad[0].status}: {bad[0].measured.get('error')}")
        train += runs[:2]
        held.append(runs[2])
        print(f"measured {s}", flush=True)
    return train, held


def ordering(fitted, held) -> tuple[int, int]:
    sps = {r.strategy: r.measured["samples_per_s"] for r in held}
    noise = {r.strategy: r.measured.get("step_time_spread", 0.0) for r in held}
    pred = {r.strategy: predict(r.config, fitted)["samples_per_s"] for r in held}
    pairs = [(a, b) for a in sps for b in sps if sps[a] > (1.15 + noise[a] + noise[b]) * sps[b]]
    agree = [(a, b) for a, b in pairs if pred[a] > pred[b]]
    for a in sps:
        print(f"  {a:20s} measured {sps[a]:8.2f} samples/s (spread {noise[a]:.0%})  predicted {pred[a]:8.2f}")
    for a, b in pairs:
        print(f"  {a} > {b} by {sps[a] / sps[b] - 1:.0%}: prediction {'agrees' if (a, b) in agree else 'DISAGREES'}")
    return len(agree), len(pairs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train, held = measure(Store(args.db or Path(tmp) / "holdout.db"))
        fitted, report = calibrate(load_platform("cpu"), train)
        err = errors_pct(fitted, held)
        print(
            f"fit on {report['runs']} runs: step-time median error {report['before']['step_time_median']:.1f}% -> "
            f"{report['after']['step_time_median']:.1f}%; memory {report['before']['memory_median']:.1f}% -> "
            f"{report['after']['memory_median']:.1f}%"
        )
        print(
            f"held out (mb {HELD[0]}, seq {HELD[1]}): step-time median error {err['step_time_median']:.1f}% "
            f"(target 25), memory {err['memory_median']:.1f}% (target 15)"
        )
        agree, pairs = ordering(fitted, held)
        print(f"ordering: {agree}/{pairs} clearly different pairs ordered as measured")
    ok = err["step_time_median"] <= 25 and err["memory_median"] <= 15 and agree == pairs
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
