"""A small real training loop (DDP, gloo, CPU) under `StepMonitor`, with injected faults.

Run under torchrun; runs several scenarios one after another in the same process group, each
in its own folder ``OUT/<i>_<scenario>`` (saves process starts in tests)::

    torchrun --nproc-per-node 4 tests/distributed/monitor_worker.py OUT \
        --scenarios clean,collapse,slow-rank --steps 20 --fault-step 8
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from faults import FaultInjector, FaultSpec  # noqa: E402
from prism_strategy.analysis.detect import DetectConfig  # noqa: E402
from prism_strategy.runtime.monitor import StepMonitor  # noqa: E402

SCALE = {
    "clean": None,
    "collapse": 0.04,
    "slow-rank": 0.03,
    "slow-wait": 0.03,
    "slow-data": 0.03,
    "hang": 600.0,
    "kill": None,
    "input-skew": 0.1,
}
FROM_START = ("slow-rank", "slow-wait", "slow-data")  # faults present from step 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--scenarios", default="clean")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--fault-step", type=int, default=7)
    p.add_argument("--fault-rank", type=int, default=2)
    p.add_argument("--hang-timeout", type=float, default=60.0)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    return p.parse_args(argv)


def run_scenario(out: Path, name: str, args: argparse.Namespace, ctx: SimpleNamespace) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.dim, 4 * args.dim), torch.nn.GELU(), torch.nn.Linear(4 * args.dim, args.dim)
    )
    kind = "none" if name == "clean" else name
    spec = FaultSpec(
        kind=kind, step=0 if name in FROM_START else args.fault_step, rank=args.fault_rank, scale=SCALE[name]
    )
    faults = FaultInjector(spec, ctx.rank).attach(model)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    mon = StepMonitor(
        out,
        ctx=ctx,
        hang_timeout_s=args.hang_timeout,
        summary_every=5,
        detect=DetectConfig(warmup_skip=2, warmup_steps=5),
    )
    gen = torch.Generator().manual_seed(ctx.rank)
    for step in range(args.steps):
        faults.set_step(step)
        faults.before_batch()  # the data phase: slow-data sleeps here
        seq = faults.seq_len(args.seq)
        x = torch.randn(args.batch, seq, args.dim, generator=gen)
        with mon.step(samples=args.batch, tokens=args.batch * seq):
            with mon.phase("forward"):
                loss = ddp(x).pow(2).mean()
            with mon.phase("backward"):
                loss.backward()
            with mon.phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
    mon.close()
    faults.detach()


def main() -> None:
    args = parse()
    logging.basicConfig(level=logging.WARNING, format="[rank%(rank)s] %(levelname)s %(message)s")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
    old = logging.getLogRecordFactory()

    def factory(*a, **kw):
        rec = old(*a, **kw)
        rec.rank = ctx.rank
        return rec

    logging.setLogRecordFactory(factory)
    for i, name in enumerate(args.scenarios.split(",")):
        run_scenario(args.out / f"{i}_{name}", name, args, ctx)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
