"""Stored CPU bench rows for the calibrate / compare / report tests: one tiny-llama run per shape
(strategy, nproc, micro-batch), measured = the cpu preset's own prediction x a factor per row
(what a fit must explain), with the fingerprint bench records."""

from __future__ import annotations

from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.specs.presets import load_platform


def cpu_runs(db: str, shapes, factor: float = 1.3) -> None:
    """Row i is measured at (factor + 0.07 i) x the prediction: no constant factor explains them all."""
    store, cpu = Store(db), load_platform("cpu")
    for i, (strategy, nproc, mb) in enumerate(shapes):
        cfg = base_config(
            model="tiny-llama", nproc=nproc, ranks_per_node=None, micro_batch=mb, seq_len=64, steps=3,
            warmup=1, precision="fp32", ckpt_freq=0, grad_accum=1, timeout_s=60,
        ) | {"strategy": strategy}  # fmt: skip
        t = predict(cfg, cpu)["step_time_s"] * (factor + 0.07 * i)
        store.add(
            Result(
                kind="bench", status="ok", strategy=strategy, platform="cpu", config=cfg,
                measured={"step_time_s": t, "samples_per_s": mb * nproc / t},
                fingerprint={"host": "h", "torch": "2.13.0", "date": "2026-12-01"},
            )
        )  # fmt: skip
