"""The handle `wrap()` returns. It hides the one real difference between engines: DeepSpeed's
engine owns backward and step, torch's DDP/FSDP2 leave them to the optimizer.

    with job.no_sync():            # every micro-batch but the last
        job.backward(job_loss(job.model(...)) / accum)
    job.backward(...)              # the last micro-batch synchronizes
    job.step(); job.zero_grad()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from prism_strategy.runtime.dist import DistContext
from prism_strategy.strategies import StrategySpec

_CKPT_PREFIX = "_checkpoint_wrapped_module."


@dataclass(frozen=True, kw_only=True, slots=True)
class WrapSummary:
    """What wrap() did, for describe()."""

    mesh: str
    blocks: int
    block_class: str
    checkpointed: int
    ckpt_freq: int | str
    precision: str
    compiled: bool
    engine_options: str
    loss: str = "upcast"
    """The loss kernel that runs (runtime/loss.py apply_loss)."""


def local_numel(p: torch.Tensor) -> int:
    """Elements this rank stores for a parameter: its DTensor shard, its ZeRO-3 partition, or all."""
    if hasattr(p, "ds_tensor"):
        return p.ds_tensor.numel()
    if hasattr(p, "to_local"):
        return p.to_local().numel()
    return p.numel()


def global_numel(p: torch.Tensor) -> int:
    return int(getattr(p, "ds_numel", p.numel()))


class Job:
    """model, optimizer, strategy and the step verbs; torch engines (DDP, FSDP2) by default."""

    def __init__(
        self,
        *,
        model: Any,
        optimizer: Any,
        strategy: StrategySpec,
        ctx: DistContext,
        module: nn.Module,
        summary: WrapSummary,
    ) -> None:
        self.model = model
        """Call this for forward: DDP / FSDP2 module or DeepSpeed engine."""
        self.optimizer = optimizer
        self.strategy = strategy
        self.ctx = ctx
        self._module = module
        self._summary = summary

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Skip gradient synchronization for the micro-batches inside (gradient accumulation)."""
        yield

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The full (unsharded) model state dict on CPU, on rank 0; {} on other ranks.
        Every rank must call it (it gathers)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        sd = get_model_state_dict(self._module, options=opts)
        return sd if self.ctx.rank == 0 else {}

    def param_storage(self) -> tuple[int, int]:
        """(elements of parameters this rank stores, elements in the whole model)."""
        params = list(self._module.parameters())
        return sum(local_numel(p) for p in params), sum(global_numel(p) for p in params)

    def describe(self) -> str:
        s, spec = self._summary, self.strategy
        local, total = self.param_storage()
        trainable = sum(global_numel(p) for p in self._module.parameters() if p.requires_grad)
        ckpt = (
            f"on {s.checkpointed} ({'selective, every block' if s.ckpt_freq == 'sac' else f'every {s.ckpt_freq}'})"
            if s.ckpt_freq
            else "off"
        )
        return "\n".join(
            (
                f"strategy   {spec.name} ({spec.engine}): {spec.description}",
                f"mesh       {s.mesh} over {self.ctx.backend} on {self.ctx.device.type}; {self.ctx.layout}",
                f"blocks     {s.blocks} x {s.block_class}; activation checkpointing {ckpt}; compile {'on' if s.compiled else 'off'}; "
                f"loss {s.loss}",
                f"precision  {s.precision}",
                f"engine     {s.engine_options}",
                f"params     {local:,} stored on this rank of {total:,} ({100 * local / max(total, 1):.1f}%); {trainable:,} trainable",
            )
        )


class DDPJob(Job):
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        if self.model.static_graph and not getattr(self.model, "_static_graph_delay_allreduce_enqueued", True):
            # static_graph records the graph in its first synchronized backward; skipping sync
            # before that trips a reducer assert. Synchronizing gives the same gradients (a sum of
            # averages is the average of sums), at one extra all-reduce, on the first step only.
            yield
            return
        with self.model.no_sync():
            yield


class FSDPJob(Job):
    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        self.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)


class DeepSpeedJob(Job):
    """The engine owns backward and step. The generated config turns DeepSpeed's own
    micro-step counting off (managed_gradient_accumulation=false): every backward accumulates
    and every job.step() is the boundary, so no_sync() needs nothing from DeepSpeed."""

    def backward(self, loss: torch.Tensor) -> None:
        self.model.backward(loss)

    def step(self) -> None:
        self.model.step()

    def zero_grad(self) -> None:
        self.model.zero_grad()

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The module's weights, gathered (ZeRO-3) onto rank 0; with bf16 these are DeepSpeed's
        bf16 module weights (the fp32 masters stay in its optimizer). torch.distributed.checkpoint
        cannot see ZeRO-3 partitions, hence DeepSpeed's own gather."""
        import deepspeed

        params = list(self._module.parameters())
        partitioned = any(hasattr(p, "ds_tensor") for p in params)  # ZeRO-3 keeps only a partition per rank
        gather = deepspeed.zero.GatheredParameters(params) if partitioned else contextlib.nullcontext()
        sd: dict[str, torch.Tensor] = {}
        with gather:
            if self.ctx.rank == 0:
                sd = {
                    k.replace(_CKPT_PREFIX, ""): v.detach().to("cpu", copy=True)
                    for k, v in self._module.state_dict().items()
                }
        if dist.is_initialized():
            dist.barrier()
        return sd
