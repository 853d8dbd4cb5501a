"""wrap() against the same strategy written by hand in torch, on the same model, in one run.

For DDP and FSDP2 (full_shard) it builds two identical models, one with `wrap()` + the Job
verbs, one with hand-written torch code (the same options), then times their training steps
interleaved (A B B A ...) so drift and noise hit both alike. Reports the ratio of median step
times, wrap / hand; target <= 1.02. Launches itself under torchrun when started plainly.

    .venv/bin/python benchmarks/wrap_overhead.py                 # 2 ranks on this machine
    .venv/bin/python benchmarks/wrap_overhead.py --nproc 4 --steps 60 --json out/wrap_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
TARGET = 1.02


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="ranks to launch when not already under a launcher")
    p.add_argument("--steps", type=int, default=40, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--strategies", default="ddp,fsdp_full_shard")
    p.add_argument("--json", type=Path, help="write the results here (rank 0)")
    return p.parse_args()


def relaunch(args: argparse.Namespace) -> int:
    """Not under a launcher: run this script under torchrun on this machine."""
    env = {
        **os.environ,
        "PRISM_DEVICE": os.environ.get("PRISM_DEVICE", "cpu"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // args.nproc))),
    }
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={args.nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        __file__,
        *sys.argv[1:],
    ]
    return subprocess.call(cmd, env=env)


def hand_written(model, strategy: str, ctx):
    """What a user writes without prism-strategy, with the options wrap() uses."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    if strategy == "ddp":
        return DistributedDataParallel(model, gradient_as_bucket_view=True)
    for i, block in enumerate(model.layers):
        fully_shard(block, mesh=ctx.mesh_1d, reshard_after_forward=i < len(model.layers) - 1)
    fully_shard(model, mesh=ctx.mesh_1d, reshard_after_forward=True)
    assert isinstance(model, torch.nn.Module)
    return model


def build_pair(strategy: str, ctx, args: argparse.Namespace):
    import torch

    from prism_strategy.runtime.wrap import wrap
    from tiny_llama import TinyConfig, TinyLlama

    cfg = TinyConfig(
        vocab=1024, hidden=args.hidden, layers=args.layers, heads=8, ffn=4 * args.hidden, max_seq=args.seq_len
    )
    torch.manual_seed(0)
    job = wrap(
        TinyLlama(cfg), strategy, ctx=ctx, optimizer=lambda ps: torch.optim.AdamW(ps, lr=1e-4), mixed_precision=None
    )
    torch.manual_seed(0)
    hand = hand_written(TinyLlama(cfg), strategy, ctx)
    opt = torch.optim.AdamW([p for p in hand.parameters() if p.requires_grad], lr=1e-4)
    return job, (hand, opt), cfg


def step_wrapped(job, tokens) -> float:
    from tiny_llama import lm_loss

    t0 = time.perf_counter()
    job.backward(lm_loss(job.model(tokens), tokens))
    job.step()
    job.zero_grad()
    return time.perf_counter() - t0


def step_hand(hand, tokens) -> float:
    from tiny_llama import lm_loss

    model, opt = hand
    t0 = time.perf_counter()
    lm_loss(model(tokens), tokens).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def measure(strategy: str, ctx, args: argparse.Namespace) -> dict:
    import torch
    import torch.distributed as dist

    job, hand, cfg = build_pair(strategy, ctx, args)
    g = torch.Generator().manual_seed(ctx.rank)
    tokens = torch.randint(0, cfg.vocab, (args.micro_batch, args.seq_len), generator=g)
    times: dict[str, list[float]] = {"wrap": [], "hand": []}
    for i in range(args.warmup + args.steps):
        order = ("wrap", "hand") if i % 2 == 0 else ("hand", "wrap")
        for name in order:
            dist.barrier()
            t = step_wrapped(job, tokens) if name == "wrap" else step_hand(hand, tokens)
            if i >= args.warmup:
                times[name].append(t)
    med = torch.tensor([statistics.median(times["wrap"]), statistics.median(times["hand"])])
    dist.all_reduce(med, op=dist.ReduceOp.MAX)  # the slowest rank sets the step time
    return {
        "strategy": strategy,
        "wrap_median_s": med[0].item(),
        "hand_median_s": med[1].item(),
        "ratio": med[0].item() / med[1].item(),
        "steps": args.steps,
    }


def main() -> int:
    args = parse_args()
    if "RANK" not in os.environ:
        return relaunch(args)
    import torch

    from prism_strategy.runtime.dist import init_distributed

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with init_distributed() as ctx:
        rows = [measure(s, ctx, args) for s in args.strategies.split(",")]
        if ctx.rank == 0:
            print(
                f"wrap() vs hand-written torch, {ctx.world_size} ranks on {ctx.device.type}/{ctx.backend}, "
                f"{args.steps} interleaved steps, median step time (slowest rank); target ratio <= {TARGET}"
            )
            for r in rows:
                verdict = "ok" if r["ratio"] <= TARGET else "over target"
                print(
                    f"  {r['strategy']:<18} wrap {1000 * r['wrap_median_s']:8.2f} ms   "
                    f"hand {1000 * r['hand_median_s']:8.2f} ms   ratio {r['ratio']:.3f}  {verdict}"
                )
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"target": TARGET, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
