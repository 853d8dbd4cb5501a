"""Per-rank peak memory as the shard count grows, measured against the model (issue 25 item 7).

Real gloo ranks on CPU: small Llama (4 layers, hidden 256, vocab 4096; its embeddings, LM head and
MLP matrices above ZeRO-3's 1e5-element persistence threshold, its attention matrices below),
micro-batch 4, seq 128, fp32, one launch at 2 ranks (one node) and one at 4 (2 nodes x 2). Each
strategy's tensor peak is torch's MemTracker over one step (bench/launch/worker.peak_memory,
DeepSpeed's own state included); the prediction is the planner's for the same config. Printed per
strategy: measured and predicted MiB at each shard count, and the drop from 2 to 4 ranks, measured
over predicted (1.0: the model shrinks what shrinks). On CPU there is no caching allocator, so this
checks allocated memory only; what the CUDA allocator's reserve does with the shard count is
docs/memory_runtime.md's "As the shard count grows".

Run: PYTHONPATH=src .venv/bin/python benchmarks/shard_memory_drop.py [--model small-llama] [--json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from prism_strategy.bench.launch.run import run_many
from prism_strategy.bench.results.store import Store
from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.specs.presets import load_platform

STRATEGIES = ("fsdp_full_shard", "zero3")
RANKS = (2, 4)


def measure(model: str) -> dict[str, dict[int, tuple[float, float]]]:
    """{strategy: {ranks: (measured bytes, predicted bytes)}}."""
    out: dict[str, dict[int, tuple[float, float]]] = {s: {} for s in STRATEGIES}
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "results.db")
        for ranks in RANKS:
            base = base_config(
                model=model,
                nproc=ranks,
                ranks_per_node=2,
                micro_batch=4,
                seq_len=128,
                steps=1,
                warmup=1,
                precision="fp32",
                ckpt_freq=0,
                grad_accum=1,
                timeout_s=600,
            )
            results = run_many([base | {"strategy": s} for s in STRATEGIES], load_platform("cpu"), store)
            for s, r in zip(STRATEGIES, results):
                if r.status != "ok":
                    raise SystemExit(f"{s} at {ranks} ranks: {r.status} {r.measured.get('error')}")
                out[s][ranks] = (r.measured["peak_memory_bytes"], r.predicted["memory_bytes"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="small-llama")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    d = measure(a.model)
    if a.json:
        print(json.dumps(d, indent=1))
        return
    mib = 2**20
    print(f"{a.model}, fp32, micro-batch 4, seq 128; MiB per rank (measured / predicted)")
    print(f"{'strategy':16s} {'2 ranks':>17s} {'4 ranks':>17s} {'drop meas':>10s} {'drop model':>11s} {'ratio':>6s}")
    for s, v in d.items():
        (m2, p2), (m4, p4) = v[2], v[4]
        print(
            f"{s:16s} {m2 / mib:8.2f}/{p2 / mib:<8.2f} {m4 / mib:8.2f}/{p4 / mib:<8.2f} {(m2 - m4) / mib:10.2f} "
            f"{(p2 - p4) / mib:11.2f} {(m2 - m4) / (p2 - p4):6.2f}"
        )


if __name__ == "__main__":
    main()
