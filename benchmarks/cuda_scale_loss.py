"""What the point prediction loses per GPU from 16 to 64 nodes at fixed work per GPU (issue 25 item 7).

Llama 3.1 8B (the preset) and a Llama 3.1 70B shape (80 layers, hidden 8192, 64 heads, 8 kv heads,
FFN 28672: meta-llama/Llama-3.1-70B config.json), FSDP2 full shard on dgx-h100, torchtitan's
selective checkpointing, seq 8192 (70B: 4096), local batch 2 (70B: 1). Per node count: tokens/s per
GPU, its change from 16 nodes, and the step's parts that grow with the node count: the exposed
collectives (NCCL's ring/tree latency and bandwidth caps, estimate/comm_nccl.py; the first
all-gather and last reduce-scatter FSDP2 cannot hide, estimate/overlap.py) and the late ranks
(E[max of N] at the published average per-rank spread, estimate/scale_loss.py), with the range's
low side. Predictions only: no multi-node CUDA record is in any fit.

Run: PYTHONPATH=src .venv/bin/python benchmarks/cuda_scale_loss.py [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from prism_strategy.estimate.option import estimate_option
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.presets import load_model
from prism_strategy.strategies import get_strategy

NODES = (16, 32, 64)


def models() -> list[tuple[object, int, int]]:
    m8 = load_model("llama-3.1-8b")
    m70 = dataclasses.replace(
        m8,
        name="llama-3.1-70b",
        source="meta-llama/Llama-3.1-70B config.json",
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        ffn=28672,
    )
    return [(m8, 8192, 2), (m70, 4096, 1)]


def rows() -> list[dict]:
    out = []
    for model, seq, mb in models():
        for nodes in NODES:
            sc = scenario_from_flags(
                model, platform="dgx-h100", nodes=nodes, seq_len=seq, micro_batch=mb, ckpt_freq="sac", loss="fused"
            )
            o = estimate_option(sc, get_strategy("fsdp_full_shard"))
            st, per = o.step, o.step.tokens_per_s_per_device / o.step.samples_per_s
            out.append(
                {
                    "model": model.name,
                    "nodes": nodes,
                    "fits": o.oom is None,
                    "tok_s_per_gpu": st.tokens_per_s_per_device,
                    "tok_s_per_gpu_low": o.samples_per_s_range[0] * per,
                    "step_s": st.step_time_s,
                    "compute_s": st.compute_s,
                    "exposed_comm_s": st.exposed_comm_s,
                    "late_ranks_s": st.late_ranks.seconds,
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    rs = rows()
    if ap.parse_args().json:
        print(json.dumps(rs, indent=1))
        return
    print(
        f"{'model':14s} {'nodes':>5s} {'tok/s/GPU':>9s} {'vs 16':>6s} {'low':>6s} {'step s':>7s} {'exposed':>8s} {'late':>7s}"
    )
    ref = {}
    for r in rs:
        v = r["tok_s_per_gpu"]
        ref.setdefault(r["model"], v)
        print(
            f"{r['model']:14s} {r['nodes']:5d} {v:9.0f} {v / ref[r['model']] - 1:+6.1%} {r['tok_s_per_gpu_low']:6.0f} "
            f"{r['step_s']:7.3f} {r['exposed_comm_s']:8.4f} {r['late_ranks_s']:7.4f}"
            + ("" if r["fits"] else "  (does not fit)")
        )


if __name__ == "__main__":
    main()
