"""A small real training loop (DDP, gloo, CPU) under `StepMonitor`, with injected faults.

Run under torchrun; runs several scenarios one after another in the same process group, each
in its own folder ``OUT/<i>_<scenario>`` (saves process starts in tests)::

    torchrun --nproc-per-node 4 tests/distributed/monitor_worker.py OUT \
        --scenarios clean,collapse,slow-rank --steps 20 --fault-step 8

With ``--hsdp`` the scenarios run a tiny Llama under prism-strategy's ``hsdp_full_shard`` on a
2 x 2 mesh (the collapse forensics' launch): ``clean-nofx`` (no capture), ``clean``,
``collective-collapse`` (every rank's reduce-scatters), ``collective-collapse-node`` (node 1's), ``host-stall``,
``gc-pause`` and ``kill-capture`` (a collective collapse whose rank 2 is SIGKILLed in its forward
after ``--kill-after`` steps of the collapse window;
it ends the launch, so it comes last). Rank 0 writes each scenario's losses to ``losses.json``.
"""

from __future__ import annotations

import argparse
import json
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
from prism_strategy.runtime.monitor import ForensicsConfig, StepMonitor  # noqa: E402

SCALE = {
    "clean": None,
    "collapse": 0.04,
    "slow-rank": 0.03,
    "slow-wait": 0.03,
    "slow-data": 0.03,
    "hang": 600.0,
    "kill": None,
    "input-skew": 0.1,
    "collective-collapse": 0.15,
    "collective-collapse-node": 0.15,
    "host-stall": 0.08,
    "gc-pause": 0.1,
    "kill-capture": 0.15,
}
HSDP_KIND = {"collective-collapse-node": "collective-collapse", "kill-capture": "collective-collapse"}
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
    p.add_argument("--hsdp", action="store_true", help="tiny Llama, hsdp_full_shard on 2 x 2 (forensics)")
    p.add_argument("--kill-after", type=int, default=2, help="kill-capture: collapse steps captured before the kill")
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


def run_hsdp_scenario(out: Path, name: str, args: argparse.Namespace, ctx) -> None:
    from prism_strategy.runtime.wrap import wrap
    from tiny_llama import TinyConfig, TinyLlama, lm_loss

    torch.manual_seed(0)
    model = TinyLlama(TinyConfig(vocab=64, hidden=32, layers=2, heads=4, ffn=64, max_seq=args.seq))
    kind = HSDP_KIND.get(name, "none" if name.startswith("clean") else name)
    spec = FaultSpec(kind=kind, step=args.fault_step, rank=2, scale=SCALE.get(name), node=name.endswith("-node"))
    faults = FaultInjector(spec, ctx.rank, ranks_per_node=ctx.ranks_per_node).attach(model)
    kill, captured = None, 0
    job = wrap(model, "hsdp_full_shard", ctx=ctx, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), mixed_precision=None)
    mon = StepMonitor(
        out,
        ctx=ctx,
        hang_timeout_s=args.hang_timeout,
        summary_every=5,
        detect=DetectConfig(warmup_skip=2, warmup_steps=5),
        forensics=None if name == "clean-nofx" else ForensicsConfig(),
    )
    gen = torch.Generator().manual_seed(ctx.rank)
    losses = []
    for step in range(args.steps):
        faults.set_step(step)
        if name == "kill-capture" and kill is None and captured == args.kill_after:
            kill = FaultInjector(FaultSpec(kind="kill", step=step, rank=2), ctx.rank).attach(model)
            kill.set_step(step)  # rank 2 dies in this step's forward, mid-capture
        tokens = torch.randint(0, 64, (args.batch, args.seq), generator=gen)
        with mon.step(samples=args.batch, tokens=args.batch * args.seq):
            with mon.phase("forward"):
                loss = lm_loss(job.model(tokens), tokens)
            with mon.phase("backward"):
                job.backward(loss)
            with mon.phase("optimizer"):
                job.step()
                job.zero_grad()
        losses.append(loss.item())
        captured += mon.capture_window == "collapse"
    mon.close()
    faults.detach()
    if ctx.rank == 0:
        (out / "losses.json").write_text(json.dumps(losses))


def main() -> None:
    args = parse()
    logging.basicConfig(level=logging.WARNING, format="[rank%(rank)s] %(levelname)s %(message)s")
    torch.set_num_threads(1)
    rank = {"rank": 0}
    old = logging.getLogRecordFactory()

    def factory(*a, **kw):
        rec = old(*a, **kw)
        rec.rank = rank["rank"]
        return rec

    logging.setLogRecordFactory(factory)
    if args.hsdp:
        from prism_strategy.runtime.dist import init_distributed

        ctx = init_distributed(ranks_per_node=2)
        rank["rank"] = ctx.rank
        for i, name in enumerate(args.scenarios.split(",")):
            run_hsdp_scenario(args.out / f"{i}_{name}", name, args, ctx)
            dist.barrier()
        dist.destroy_process_group()
        return
    dist.init_process_group("gloo")
    ctx = SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
    rank["rank"] = ctx.rank
    for i, name in enumerate(args.scenarios.split(",")):
        run_scenario(args.out / f"{i}_{name}", name, args, ctx)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
