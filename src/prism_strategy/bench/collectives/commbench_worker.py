"""One rank of a commbench launch (bench/collectives/commbench.py, through bench/launch/harness.py under torchrun).

    python -m torch.distributed.run --nproc-per-node 4 -m prism_strategy.bench.collectives.commbench_worker \
        --config '[{...}, ...]' --out DIR

Each config is one strategy's step: its collectives (op, group, dtype, bytes per call, calls) in
the engine's order (engines' `step_collectives`). No model, no compute: each kind of collective
is issued `calls` times on buffers of its size, on the group the engine uses:
- "world": the default group (DDP, DeepSpeed), or FSDP2's 1-D mesh group (runtime/apply.py);
- "node" / "across_nodes": the shard / replicate dimension of the 2-D HSDP mesh
  (runtime/dist.py `DistContext.mesh_2d`), so every replicate group runs at once, as in HSDP.
Timing: `warmup` whole replays, then `repetitions` replays; in each, every kind starts after a
barrier and is timed from its first call to the device sync after its last (at most MAX_CALLS
calls a repetition). Per kind: the median seconds per call and the spread (max - min) / median.
Then one more replay runs under the census recorder (bench/launch/census_record.py), so what was
issued (op, group size, dtype, calls, bytes) is checked against the engine model, as census does.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from prism_strategy.bench.launch.worker import device_sync, parse_args, rank_result, worker_context
from prism_strategy.specs.libraries import collective_prefixes, library_of_backend

MAX_CALLS = 64
"""Calls timed per kind and repetition: a step issuing more calls of one kind is timed on 64."""
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def group_of(ctx: Any, world_on_mesh: bool, kind: str) -> Any:
    """The process group of a group kind, as the engines build it (None: the default group)."""
    from prism_strategy.strategies import MeshAxis

    if kind == "world":
        return ctx.mesh_1d.get_group() if world_on_mesh else None
    if ctx.nodes == 1:
        return None  # one node: the node is the world
    axis = MeshAxis.SHARD if kind == "node" else MeshAxis.REPLICATE
    return ctx.mesh_2d[str(axis)].get_group()


def elements(op: str, bytes_per_call: float, itemsize: int, group_size: int) -> int:
    """Elements of the payload: all-gather / reduce-scatter payloads split evenly over the group."""
    n = max(1, round(bytes_per_call / itemsize))
    if op in ("all_gather", "reduce_scatter"):
        n = -(-n // group_size) * group_size
    return n


class Kind:
    """One kind of collective with its buffers, ready to issue."""

    def __init__(self, c: dict[str, Any], group: Any, device: torch.device):
        self.c, self.group, self.calls = c, group, int(c["calls"])
        dtype = _DTYPES[c["dtype"]]
        size = dist.get_world_size(group)
        n = elements(c["op"], float(c["bytes_per_call"]), torch.finfo(dtype).bits // 8, size)
        # zeros: repeated sums stay finite (ones would overflow bf16 after ~64 all-reduces over 4 ranks)
        self.big = torch.zeros(n, dtype=dtype, device=device)
        self.small = torch.zeros(n // size, dtype=dtype, device=device) if c["op"] != "all_reduce" else None
        self.src = dist.get_global_rank(group, 0) if group is not None else 0

    def issue(self) -> None:
        op = self.c["op"]
        if op == "all_reduce":
            dist.all_reduce(self.big, group=self.group)
        elif op == "all_gather":  # FSDP2's entry points (torch >= 2.13; the *_tensor names before)
            getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(self.big, self.small, group=self.group)
        elif op == "reduce_scatter":
            getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(self.small, self.big, group=self.group)
        elif op == "broadcast":
            dist.broadcast(self.big, src=self.src, group=self.group)
        else:
            raise ValueError(f"commbench cannot replay {op!r}")

    def bytes_per_call(self) -> int:
        return self.big.numel() * self.big.element_size()


def _replay(kinds: list[Kind], device: torch.device, times: list[list[float]] | None) -> None:
    for i, k in enumerate(kinds):
        dist.barrier()
        n = min(k.calls, MAX_CALLS) if times is not None else k.calls
        t0 = time.perf_counter()
        for _ in range(n):
            k.issue()
        device_sync(device)
        if times is not None:
            times[i].append((time.perf_counter() - t0) / n)


def backend_version(ctx: Any) -> str:
    device = library_of_backend(ctx.backend).device
    if device == "cuda":  # device-only: CUDA and ROCm (torch.cuda.nccl is RCCL there)
        return f"{ctx.backend} " + ".".join(str(v) for v in torch.cuda.nccl.version())
    return f"{ctx.backend} (torch {torch.__version__})"  # oneCCL ships inside torch's XPU build


def run(config: dict[str, Any]) -> dict[str, Any]:
    from prism_strategy.bench.launch.census_record import record, summarise, tag_collectives

    ctx = worker_context(config)
    tag_collectives()
    kinds = [Kind(c, group_of(ctx, config["world_on_mesh"], c["group"]), ctx.device) for c in config["collectives"]]
    for _ in range(int(config.get("warmup", 2))):
        _replay(kinds, ctx.device, [[] for _ in kinds])
    times: list[list[float]] = [[] for _ in kinds]
    for _ in range(int(config.get("repetitions", 5))):
        _replay(kinds, ctx.device, times)
    recorded = summarise(record(lambda: _replay(kinds, ctx.device, None), ctx.world_size))
    rows = [
        {
            "median_s": statistics.median(t),
            "spread": (max(t) - min(t)) / statistics.median(t),
            "repetitions": len(t),
            "bytes_replayed": k.bytes_per_call(),
        }
        for k, t in zip(kinds, times)
    ]
    return rank_result(
        ctx,
        backend_version=backend_version(ctx),
        kinds=rows,
        census=recorded["collectives"] + recorded["control"],
        collective_env={k: v for k, v in os.environ.items() if k.startswith(collective_prefixes())},
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configs = json.loads(args.config)
    rank = int(os.environ.get("RANK", "0"))
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for config in configs:
        try:
            results.append(run(config))
        except Exception as e:  # reported to the harness as this strategy's failure
            results.append(
                {
                    "rank": rank,
                    "status": "failed",
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-4000:],
                }
            )
    tmp = args.out / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps(results))
    os.replace(tmp, Path(args.out) / f"rank{rank}.json")
    if dist.is_initialized() and all(r["status"] == "ok" for r in results):
        dist.destroy_process_group()
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
