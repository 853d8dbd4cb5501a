"""The caching allocator's terms measured on one GPU: what the published records cannot decide.

For one model preset, micro-batch and longest text length it trains STEPS steps on one device
(bf16 params and AdamW state, torch's default foreach AdamW, HF's loss, no checkpointing) in four
cases: fixed length (every batch at --seq-len, as torchtitan packs) or varying lengths (each
batch padded to a length drawn uniformly from [--seq-len / 4, --seq-len], seeded, as PRISM pads),
each with and without PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (one subprocess per case:
the allocator reads its config when it starts). It reads max_memory_allocated, max_memory_reserved
and num_alloc_retries, and sets beside them what estimate/memory_runtime.py predicts, plus the
factors the measurement implies (reserved - measured allocated over the predicted transient and
per-sample activations, as benchmarks/allocator_fit.py fits the published rows).

device-only: CUDA (torch.cuda memory statistics). On other machines only --dry-run runs (the
predictions for the four cases). Exit code: 0 done, 2 bad input or no CUDA device.

    python benchmarks/allocator_device_check.py --platform dgx-h200 --model qwen3-0.6b --micro-batch 4
    python benchmarks/allocator_device_check.py --dry-run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "src" / "prism_strategy").is_dir():
    sys.path.insert(0, str(ROOT / "src"))

from prism_strategy.estimate.memory_runtime import runtime_memory, transient_bytes  # noqa: E402
from prism_strategy.flags import scenario_from_flags  # noqa: E402
from prism_strategy.planning.planner import evaluate  # noqa: E402
from prism_strategy.specs.cluster import GiB  # noqa: E402
from prism_strategy.specs.errors import SpecError  # noqa: E402
from prism_strategy.strategies import get_strategy  # noqa: E402

CASES = (("fixed", False), ("fixed", True), ("varying", False), ("varying", True))
"""(lengths, expandable_segments)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--platform", default="dgx-h200")
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--dry-run", action="store_true", help="predictions only (any machine)")
    ap.add_argument("--child", choices=("fixed", "varying"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if min(a.micro_batch, a.seq_len, a.steps) < 1 or a.seq_len < 4:
        raise SpecError("--micro-batch and --steps must be >= 1 and --seq-len >= 4")
    return a


def predict(a: argparse.Namespace, lengths: str, expandable: bool) -> dict[str, float]:
    sc = scenario_from_flags(
        a.model,
        platform=a.platform,
        nodes=1,
        ranks_per_node=1,
        seq_len=a.seq_len,
        micro_batch=a.micro_batch,
        global_batch=a.micro_batch,
        ckpt_freq=0,
        precision="bf16-pure",
        varying_lengths=lengths == "varying",
        expandable_segments=expandable,
    )
    o = evaluate(sc, get_strategy("ddp"))  # one rank, no wrapper: DDP at world 1 (bench/fit/published.py)
    rt = runtime_memory(o.memory, sc.platform, sc.training)
    return {
        "allocated": rt.allocated,
        "reserved": rt.reserved,
        "at_limit": o.memory_runtime["memory_at_limit_gib"] * GiB,
        "transient": transient_bytes(o.memory),
        "activations": o.memory.activations,
    }


def lengths_for(a: argparse.Namespace, lengths: str) -> list[int]:
    """Each step's padded length: the longest first (the peak sizes appear at once), then seeded draws."""
    rng = random.Random(0)
    if lengths == "fixed":
        return [a.seq_len] * a.steps
    return [a.seq_len] + [rng.randint(a.seq_len // 4, a.seq_len) for _ in range(a.steps - 1)]


def child(a: argparse.Namespace) -> dict[str, float]:
    """device-only: CUDA. One case in this process (the parent set PYTORCH_CUDA_ALLOC_CONF)."""
    import torch

    from prism_strategy.bench.launch.worker import build_model

    dev = torch.device("cuda")
    with dev:
        model = build_model({"model": a.model}).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = model.config.vocab_size
    for n in lengths_for(a, a.child):
        ids = torch.randint(vocab, (a.micro_batch, n), device=dev)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(dev)
    stats = torch.cuda.memory_stats(dev)
    return {
        "allocated": float(torch.cuda.max_memory_allocated(dev)),
        "reserved": float(torch.cuda.max_memory_reserved(dev)),
        "retries": float(stats.get("num_alloc_retries", 0)),
    }


def measure(a: argparse.Namespace, lengths: str, expandable: bool) -> dict[str, float]:
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=f"expandable_segments:{expandable}")
    cmd = [
        sys.executable,
        __file__,
        "--child",
        lengths,
        "--model",
        a.model,
        "--platform",
        a.platform,
        "--micro-batch",
        str(a.micro_batch),
        "--seq-len",
        str(a.seq_len),
        "--steps",
        str(a.steps),
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": tail}  # type: ignore[dict-item]
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(lengths: str, expandable: bool, p: dict[str, float], m: dict[str, float] | None) -> str:
    head = (
        f"{lengths:8s} {'on' if expandable else 'off':>4s}  predicted alloc {p['allocated'] / GiB:6.2f} reserved "
        f"{p['reserved'] / GiB:6.2f} at limit {p['at_limit'] / GiB:6.2f}"
    )
    if m is None:
        return head
    if "error" in m:
        return f"{head}  measured: failed ({m['error']})"
    cache = m["reserved"] - m["allocated"]
    return (
        f"{head}  measured alloc {m['allocated'] / GiB:6.2f} reserved {m['reserved'] / GiB:6.2f} retries "
        f"{m['retries']:.0f}; (reserved - alloc) / transient {cache / p['transient']:.3f}, / activations "
        f"{cache / p['activations']:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
        if a.child:
            print(json.dumps(child(a)))
            return 0
        preds = [(c, predict(a, *c)) for c in CASES]
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    measured = not a.dry_run
    if measured:
        import torch

        if not torch.cuda.is_available():  # device-only: the measurement needs CUDA's caching allocator
            print("error: no CUDA device; run with --dry-run for the predictions only", file=sys.stderr)
            return 2
    print(f"{a.model}, micro-batch {a.micro_batch}, longest {a.seq_len} tokens, {a.steps} steps, platform {a.platform}")
    for (lengths, expandable), p in preds:
        print(row(lengths, expandable, p, measure(a, lengths, expandable) if measured else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
