"""Train a small Llama-style model (or any Hugging Face config) with any prism-strategy strategy.

Synthetic token data, gradient accumulation, per-step logging; the strategy is a flag.
Fault injection for the monitor (`--fault collapse|slow-rank|hang|input-skew|collective-collapse|
host-stall|gc-pause`, with `--monitor-dir`), then `prism-strategy analyze DIR` (docs/collapse.md).

    # one CPU machine, 4 ranks standing in for 2 nodes x 2 devices
    torchrun --nproc-per-node 4 examples/train.py --strategy hsdp_shard_grad_op --ranks-per-node 2
    # Aurora, 2 nodes x 12 tiles (env profile exported first, see `prism-strategy emit`)
    mpiexec -n 24 -ppn 12 --cpu-bind list:... python examples/train.py --strategy fsdp_full_shard --hf llama
    # the settings `prism-strategy emit` wrote
    torchrun --nproc-per-node 2 examples/train.py --from-file out/strategy.toml

Environment contract: whatever the launcher sets (torchrun's RANK/LOCAL_RANK/WORLD_SIZE,
mpiexec's PALS_*/PMI_*, OpenMPI's OMPI_COMM_WORLD_*, Slurm's SLURM_*) plus MASTER_ADDR/PORT
for multi-node runs; see prism_strategy.runtime.launch_env. Output: one line per logged step on
rank 0 (and a JSON line per step with --json-log), per-rank phase timing with --monitor-dir DIR
(read it with `prism-strategy analyze DIR`), the model's full state dict with --save.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from faults import FaultInjector, add_fault_args, fault_from_args  # noqa: E402
from prism_strategy.runtime.dist import init_distributed  # noqa: E402
from prism_strategy.runtime.monitor import ForensicsConfig, StepMonitor  # noqa: E402
from prism_strategy.runtime.wrap import wrap, wrap_from_file  # noqa: E402
from prism_strategy.strategies import STRATEGY_NAMES  # noqa: E402
from tiny_llama import TinyConfig, TinyLlama, freeze_backbone, lm_loss  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategy", choices=STRATEGY_NAMES, default="ddp")
    p.add_argument("--from-file", type=Path, help="strategy.toml from `prism-strategy emit` (overrides strategy flags)")
    p.add_argument(
        "--hf", metavar="MODEL_TYPE", help="build a small transformers model of this type (llama, qwen3, ...)"
    )
    p.add_argument("--hf-config", type=Path, help="build (random init) the model of this HF config.json")
    p.add_argument("--mode", choices=("e2e", "projector"), default="e2e", help="projector: frozen backbone")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=2)
    p.add_argument(
        "--steps", type=int, help="optimizer steps [default: 10; with --fault: long enough to see it and capture it]"
    )
    p.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--ckpt-freq", type=int, default=0, help="activation checkpointing every k-th block; 0 = none")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--static-graph", action="store_true", help="ddp: the set of used parameters is fixed")
    p.add_argument("--find-unused-parameters", action="store_true")
    p.add_argument("--ranks-per-node", type=int, help="override the launcher's (a 2x2 mesh on one machine)")
    p.add_argument("--log-every", type=int, default=1)
    p.add_argument("--json-log", type=Path, help="append one JSON line per step (rank 0)")
    p.add_argument("--save", type=Path, help="write the full state dict here at the end (rank 0)")
    p.add_argument(
        "--monitor-dir", type=Path, help="StepMonitor folder: per-rank phase timing, detection, hang watchdog"
    )
    p.add_argument("--hang-timeout", type=float, default=300, help="StepMonitor watchdog: seconds without progress")
    p.add_argument("--summary-every", type=int, default=10, help="StepMonitor: cross-rank summary every K steps")
    p.add_argument("--no-forensics", action="store_true", help="StepMonitor: no collapse capture (docs/collapse.md)")
    add_fault_args(p)  # --fault KIND --fault-step --fault-rank --fault-scale --fault-op --fault-node
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.steps is None:  # a fault: its first step, then two detection windows and the capture's 5 steps
        args.steps = 10 if args.fault == "none" else args.fault_step + 2 * args.summary_every + 5
    return args


def build_model(args: argparse.Namespace) -> tuple[torch.nn.Module, bool]:
    """(model, is_hf). HF models return .loss from labels; the tiny one returns logits."""
    torch.manual_seed(args.seed)
    if args.hf or args.hf_config:
        import transformers

        if args.hf_config:
            cfg = transformers.AutoConfig.from_pretrained(args.hf_config)
        else:
            cfg = transformers.AutoConfig.for_model(
                args.hf,
                vocab_size=args.vocab,
                hidden_size=args.hidden,
                intermediate_size=2 * args.hidden,
                num_hidden_layers=args.layers,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=max(args.seq_len, 128),
            )
        return transformers.AutoModelForCausalLM.from_config(cfg), True
    cfg = TinyConfig(
        vocab=args.vocab,
        hidden=args.hidden,
        layers=args.layers,
        heads=4,
        ffn=2 * args.hidden,
        max_seq=args.seq_len,
        projector_in=32 if args.mode == "projector" else 0,
    )
    model = TinyLlama(cfg)
    if args.mode == "projector":
        freeze_backbone(model)
    return model, False


def micro_batches(
    step: int, rank: int, args: argparse.Namespace, vocab: int, features: int, seq_len: int | None = None
):
    """Synthetic tokens, different on every rank, step and micro-batch."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
    for _ in range(args.grad_accum):
        tokens = torch.randint(0, vocab, (args.micro_batch, seq_len or args.seq_len), generator=g)
        feats = torch.randn(args.micro_batch, 4, features, generator=g) if features else None
        yield tokens, feats


def make_job(model: torch.nn.Module, ctx, args: argparse.Namespace):
    opt_cls = torch.optim.AdamW if args.optimizer == "adamw" else torch.optim.SGD
    factory = lambda params: opt_cls(params, lr=args.lr)  # noqa: E731
    if args.from_file:
        return wrap_from_file(model, args.from_file, ctx=ctx, optimizer=factory)
    return wrap(
        model,
        args.strategy,
        ctx=ctx,
        optimizer=factory,
        mixed_precision="bf16" if args.precision == "bf16" else None,
        ckpt_freq=args.ckpt_freq,
        static_graph=args.static_graph or None,
        find_unused_parameters=args.find_unused_parameters,
        compile=args.compile,
    )


def train_step(
    job,
    step: int,
    ctx,
    args: argparse.Namespace,
    is_hf: bool,
    vocab: int,
    features: int,
    phase=lambda name: contextlib.nullcontext(),
    seq_len: int | None = None,
) -> float:
    """One optimizer step over grad_accum micro-batches; returns this rank's mean loss."""
    total = 0.0
    for i, (tokens, feats) in enumerate(micro_batches(step, ctx.rank, args, vocab, features, seq_len)):
        tokens = tokens.to(ctx.device)
        sync = i == args.grad_accum - 1
        with contextlib.nullcontext() if sync else job.no_sync():
            with phase("forward"):
                if is_hf:
                    loss = job.model(input_ids=tokens, labels=tokens).loss
                else:
                    loss = lm_loss(job.model(tokens, None if feats is None else feats.to(ctx.device)), tokens)
            with phase("backward"):
                job.backward(loss / args.grad_accum)
        total += loss.detach().float().item()
    with phase("optimizer"):
        job.step()
        job.zero_grad()
    return total / args.grad_accum


def log_step(step: int, loss: float, seconds: float, tokens: int, args: argparse.Namespace, ctx) -> None:
    mean = torch.tensor([loss], device=ctx.device)
    dist.all_reduce(mean)
    if ctx.rank != 0:
        return
    rec = {
        "step": step,
        "loss": round(mean.item() / ctx.world_size, 5),
        "step_s": round(seconds, 4),
        "tokens_per_s": round(tokens / seconds, 1),
    }
    if step % args.log_every == 0 or step == args.steps - 1:
        print(
            f"step {step:4d}  loss {rec['loss']:.4f}  {1000 * seconds:8.1f} ms  {rec['tokens_per_s']:,.0f} tok/s",
            flush=True,
        )
    if args.json_log:
        with args.json_log.open("a") as f:
            f.write(json.dumps(rec) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with init_distributed(ranks_per_node=args.ranks_per_node) as ctx:
        model, is_hf = build_model(args)
        vocab = model.config.vocab_size if is_hf else model.cfg.vocab
        features = 0 if is_hf else model.cfg.projector_in
        spec = fault_from_args(args)
        faults = FaultInjector(spec, rank=ctx.rank, ranks_per_node=ctx.ranks_per_node).attach(model)  # inner module
        job = make_job(model, ctx, args)
        tokens = args.micro_batch * args.grad_accum * args.seq_len * ctx.world_size
        if ctx.rank == 0:
            print(f"{ctx}\n{job.describe()}\ntokens per step: {tokens:,}", flush=True)
        mon = (
            StepMonitor(
                args.monitor_dir,
                ctx=ctx,
                hang_timeout_s=args.hang_timeout,
                summary_every=args.summary_every,
                forensics=None if args.no_forensics else ForensicsConfig(),
            )
            if args.monitor_dir
            else None
        )
        for step in range(args.steps):
            t0 = time.perf_counter()
            faults.set_step(step)
            faults.before_batch()  # slow-data sleeps here, in the data phase
            seq = faults.seq_len(args.seq_len)
            with (
                mon.step(samples=args.micro_batch * args.grad_accum, tokens=args.micro_batch * args.grad_accum * seq)
                if mon
                else contextlib.nullcontext()
            ):
                phase = mon.phase if mon else (lambda name: contextlib.nullcontext())
                loss = train_step(job, step, ctx, args, is_hf, vocab, features, phase, seq)
            log_step(step, loss, time.perf_counter() - t0, tokens, args, ctx)
        if mon:
            mon.close()
        state = job.full_state_dict()
        if args.save and ctx.rank == 0:
            torch.save(state, args.save)
            print(f"saved {len(state)} tensors to {args.save}")


if __name__ == "__main__":
    main()
