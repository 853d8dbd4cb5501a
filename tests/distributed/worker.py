"""One rank of a distributed test launch: `python worker.py SCENARIO OUT_DIR`.

Runs many cases in one process group (process start is the expensive part), compares each
against a single-process run of the same global batch, and writes what it measured to
OUT_DIR/rank{r}.json for the tests to assert on.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import warnings
from pathlib import Path

import torch

from prism_strategy.runtime.dist import init_distributed
from prism_strategy.runtime.wrap import wrap, wrap_from_file
from tiny_llama import TinyConfig, TinyLlama, freeze_backbone, lm_loss, synthetic_batch

CFG = TinyConfig(layers=4)
PROJ_CFG = TinyConfig(layers=2, projector_in=16)
MICRO, SEQ, STEPS = 2, 16, 3
TORCH_STRATEGIES = ("ddp", "fsdp_full_shard", "fsdp_shard_grad_op", "hsdp_full_shard", "hsdp_shard_grad_op")
ZERO_STRATEGIES = ("zero1", "zero2", "zero3")
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.05),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01),
}


def make_model(cfg: TinyConfig = CFG, prep=None) -> TinyLlama:
    torch.manual_seed(0)
    model = TinyLlama(cfg)
    if prep:
        prep(model)
    return model


def global_batch(step: int, world: int, cfg: TinyConfig) -> dict[str, torch.Tensor]:
    return synthetic_batch(step, batch=MICRO * world, seq=SEQ, vocab=cfg.vocab, features=cfg.projector_in)


def forward_loss(model, rows: dict[str, torch.Tensor], scale: float = 1.0) -> torch.Tensor:
    return lm_loss(model(rows["tokens"], rows.get("features")), rows["tokens"]) / scale


_REFS: dict = {}


def reference(kind: str, world: int, cfg: TinyConfig = CFG, prep=None) -> dict[str, torch.Tensor]:
    """Plain single-process training on the whole global batch."""
    key = (kind, world, cfg, prep)
    if key not in _REFS:
        model = make_model(cfg, prep)
        opt = OPTIMIZERS[kind]([p for p in model.parameters() if p.requires_grad])
        for step in range(STEPS):
            forward_loss(model, global_batch(step, world, cfg)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        _REFS[key] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return _REFS[key]


def stored_elements(module: torch.nn.Module) -> int:
    """Parameter elements this rank holds, read from the local shards themselves."""
    n = 0
    for p in module.parameters():
        if hasattr(p, "ds_tensor"):
            n += p.ds_tensor.numel()
        elif hasattr(p, "to_local"):
            n += p.to_local().numel()
        else:
            n += p.numel()
    return n


def train(job, ctx, cfg: TinyConfig, *, accum: int = 1, on_backward=None) -> float:
    micro = MICRO // accum
    for step in range(STEPS):
        b = global_batch(step, ctx.world_size, cfg)
        for i in range(accum):
            lo = ctx.rank * MICRO + i * micro
            rows = {k: v[lo : lo + micro].to(ctx.device) for k, v in b.items()}
            with job.no_sync() if i < accum - 1 else contextlib.nullcontext():
                loss = forward_loss(job.model, rows, accum)
                job.backward(loss)
        if on_backward:
            on_backward(job)
        job.step()
        job.zero_grad()
    return float(loss.detach()) * accum


def compare(job, ctx, ref: dict[str, torch.Tensor]) -> dict:
    sd = job.full_state_dict()
    if ctx.rank != 0:
        return {"state_dict_entries": len(sd)}
    diffs = {k: (sd[k].float() - ref[k].float()).abs().max().item() for k in ref if k in sd}
    return {
        "keys_match": sorted(sd) == sorted(ref),
        "max_diff": max(diffs.values()),
        "worst": max(diffs, key=diffs.get),
    }


def movement(job, ctx, cfg: TinyConfig, prep) -> dict:
    """How far training moved each parameter from its start, in the dtype the job holds it in:
    frozen ones must not move at all, trainable ones must (every rank calls full_state_dict)."""
    sd, start = job.full_state_dict(), make_model(cfg, prep)
    if ctx.rank != 0:
        return {}
    change = {
        n: (sd[n].float() - p.detach().to(sd[n].dtype).float()).abs().max().item() for n, p in start.named_parameters()
    }
    frozen = [change[n] for n, p in start.named_parameters() if not p.requires_grad]
    trainable = [change[n] for n, p in start.named_parameters() if p.requires_grad]
    return {
        "frozen_max_change": max(frozen),
        "trainable_min_change": min(trainable),
        "dtypes": sorted({str(sd[n].dtype) for n, _ in start.named_parameters()}),
    }


def case(
    ctx,
    strategy: str,
    kind: str,
    *,
    ckpt: int = 0,
    accum: int = 1,
    mp=None,
    cfg=CFG,
    prep=None,
    wrapper=None,
    on_backward=None,
    after=None,
    **kw,
) -> dict:
    model = make_model(cfg, prep)
    total = sum(p.numel() for p in model.parameters())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if wrapper:
            job = wrapper(model)
        else:
            job = wrap(model, strategy, ctx=ctx, optimizer=OPTIMIZERS[kind], mixed_precision=mp, ckpt_freq=ckpt, **kw)
        loss = train(job, ctx, cfg, accum=accum, on_backward=on_backward)
    out = {
        "loss": loss,
        "finite": math.isfinite(loss),
        "stored": stored_elements(job._module),
        "total": total,
        "param_storage": list(job.param_storage()),
        "describe": job.describe(),
        "warnings": [str(w.message) for w in caught if issubclass(w.category, UserWarning)],
    }
    if mp is None:
        out |= compare(job, ctx, reference(kind, ctx.world_size, cfg, prep))
    if after:
        out |= after(job, ctx, cfg, prep)
    return out


def strategy_cases(ctx, strategies) -> dict:
    res = {}
    for s in strategies:
        res[f"{s}/sgd"] = case(ctx, s, "sgd")
        res[f"{s}/adamw_ckpt1"] = case(ctx, s, "adamw", ckpt=1)
        res[f"{s}/accum_ckpt2"] = case(ctx, s, "sgd", ckpt=2, accum=2)
        res[f"{s}/bf16"] = case(ctx, s, "sgd", mp="bf16")
    if "ddp" in strategies:
        res["ddp/accum_static_graph"] = case(ctx, "ddp", "sgd", accum=2, static_graph=True)
    return res


# ----------------------------------------------------------------------------- projector / DDP


def _trainable_projector_and_audio(model: TinyLlama) -> None:
    freeze_backbone(model)
    for name, p in model.named_parameters():
        if name.startswith("audio_projector."):
            p.requires_grad_(True)


def projector_cases(ctx) -> dict:
    """Frozen backbone, DDP with static_graph: what gets gradients and what is communicated."""
    counted = {"elements": 0}
    grads: dict[str, list[str]] = {}

    def count_hook(state, bucket):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        counted["elements"] += bucket.buffer().numel()
        return allreduce_hook(state, bucket)

    def wrapper(model):
        job = wrap(model, "ddp", ctx=ctx, optimizer=OPTIMIZERS["sgd"], mixed_precision=None, static_graph=True)
        job.model.register_comm_hook(None, count_hook)
        return job

    def record(job):
        grads["with_grad"] = sorted(n for n, p in job._module.named_parameters() if p.grad is not None)

    res = {
        "projector": case(ctx, "ddp", "sgd", cfg=PROJ_CFG, prep=freeze_backbone, wrapper=wrapper, on_backward=record)
    }
    res["projector"] |= {
        "communicated_per_step": counted["elements"] / STEPS,
        "with_grad": grads["with_grad"],
        "trainable": sum(p.numel() for p in make_model(PROJ_CFG, freeze_backbone).parameters() if p.requires_grad),
    }
    unused_cfg = TinyConfig(layers=2, projector_in=16, unused_modality=True)
    for name, kw in (
        ("unused/static_graph", dict(static_graph=True)),
        ("unused/find_unused", dict(find_unused_parameters=True)),
    ):
        res[name] = case(ctx, "ddp", "sgd", cfg=unused_cfg, prep=_trainable_projector_and_audio, **kw)
    return res


# ----------------------------------------------------------------------------- from a strategy.toml


def from_file_case(ctx, out: Path, strategy: str, extra: str = "", ds_config: dict | None = None) -> dict:
    folder = out / f"emit_rank{ctx.rank}"
    folder.mkdir(exist_ok=True)
    text = (
        f'strategy = "{strategy}"\nmixed_precision = "none"\nckpt_freq = 1\nfind_unused_parameters = false\n'
        f"compile = false\nranks_per_node = {ctx.ranks_per_node}\n{extra}"
    )
    if ds_config is not None:
        (folder / "ds_config.json").write_text(json.dumps(ds_config))
        text += 'ds_config = "ds_config.json"\n'
    (folder / "strategy.toml").write_text(text)
    wrapper = lambda model: wrap_from_file(model, folder / "strategy.toml", ctx=ctx, optimizer=OPTIMIZERS["sgd"])  # noqa: E731
    return case(ctx, strategy, "sgd", wrapper=wrapper)


# ----------------------------------------------------------------------------- scenarios


def ctx_facts(ctx) -> dict:
    t = torch.tensor([ctx.rank + 1.0, 1.0])
    torch.distributed.all_reduce(t)
    return {
        "rank": ctx.rank,
        "local_rank": ctx.local_rank,
        "world_size": ctx.world_size,
        "nodes": ctx.nodes,
        "ranks_per_node": ctx.ranks_per_node,
        "device": str(ctx.device),
        "backend": ctx.backend,
        "launcher": ctx.launcher,
        "all_reduce": t.tolist(),
        "mesh_2d": list(ctx.mesh_2d.shape),
        "mesh_1d": list(ctx.mesh_1d.shape),
        "str": str(ctx),
    }


def scenario_torch(ctx, out: Path) -> dict:
    res = strategy_cases(ctx, TORCH_STRATEGIES) | projector_cases(ctx)
    res["from_file/hsdp_full_shard"] = from_file_case(ctx, out, "hsdp_full_shard")
    return res


def scenario_deepspeed(ctx, out: Path) -> dict:
    from prism_strategy.emit.deepspeed import build_ds_config
    from prism_strategy.strategies import get_strategy

    res = strategy_cases(ctx, ZERO_STRATEGIES)
    for s in ZERO_STRATEGIES:  # float inputs (projector features) meet bf16 params
        res[f"{s}/projector_bf16"] = case(ctx, s, "sgd", mp="bf16", cfg=PROJ_CFG, prep=freeze_backbone, after=movement)
    emitted = build_ds_config(
        get_strategy("zero2"), micro_batch=MICRO, world_size=ctx.world_size, grad_accum=2, precision="fp32"
    )
    res["from_file/zero2"] = from_file_case(ctx, out, "zero2", ds_config=emitted)
    return res


def scenario_compile(ctx, out: Path) -> dict:
    """torch.compile of checkpointed blocks under DDP and FSDP2: trains and still matches."""
    return {"fsdp_full_shard/compile_ckpt1": case(ctx, "fsdp_full_shard", "sgd", ckpt=1, compile=True, cfg=PROJ_CFG)}


SCENARIOS = {
    "torch": (scenario_torch, 2),
    "deepspeed": (scenario_deepspeed, None),
    "env": (None, 1),
    "compile": (scenario_compile, None),
}


def main() -> None:
    name, out = sys.argv[1], Path(sys.argv[2])
    run, rpn = SCENARIOS[name]
    torch.set_num_threads(1)
    with init_distributed(ranks_per_node=rpn, timeout_s=120) as ctx:
        res = {"ctx": ctx_facts(ctx)}
        if run:
            res |= run(ctx, out)
        (out / f"rank{ctx.rank}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
