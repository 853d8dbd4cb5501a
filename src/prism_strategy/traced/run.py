"""One traced session: a fake process group of the target world, FakeTensorMode, the model
wrapped as `wrap()` wraps it, and full training steps run under torch's memory trackers.

Imported only inside `traced/estimate.py` functions (it imports torch at the top).

Order (each step avoids a pitfall seen with torch 2.13 on CPU):
1. fake process group (rank 0 of `world`) and the device mesh, *outside* fake mode;
2. FakeTensorMode; the model is built in it (fake tensors on the fake "cpu" device, no memory;
   dtype via set_default_dtype, not model.to(dtype)) and wrapped (FSDP2: the real `wrap()`;
   DDP: checkpointing and autocast as `wrap()` applies them, on one process); transformers'
   masks behave as in an eager run (traced_model.eager_hf_masks);
3. one warm-up step (optimizer state exists from then on, as in steady training; DTensor's
   first-call propagation under fake mode would otherwise inflate the first optimizer step);
4. each measured micro-batch: a fresh tracker around zero_grad -> forward -> loss -> backward ->
   optimizer step. AdamW/SGD run with foreach=False (foreach inflates optimizer state ~40x under
   fake tensors).

The trackers are torch's, subclassed where they fall short; the subclasses touch their private
state (_update_peak_stats, _curr_mem_snap, _WINFO, _in_opt, _mod_tracker, _fsdp_state,
_param_to_grad_hook_handles as of torch 2.13): tests/unit/traced/test_traced.py pins the numbers.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPState
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils._pytree import tree_map_only

from prism_strategy.engines import engine_of
from prism_strategy.runtime.apply import autocast_hooks
from prism_strategy.runtime.blocks import apply_checkpointing, find_blocks
from prism_strategy.runtime.dist import DistContext
from prism_strategy.runtime.loss import apply_loss
from prism_strategy.runtime.wrap import wrap
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec
from prism_strategy.traced.model import BuiltModel, default_dtype, eager_hf_masks

_TOTAL = "Total"
# Tracker categories -> the analytic model's keys (estimate/memory.py KEYS).
FSDP_KEYS = {
    "Sharded Param": "params",
    "Sharded Grad": "grads",
    "OptState": "optimizer",
    "Activation": "activations",
    "Temp": "activations",
    "Inputs": "activations",
    "Unsharded Grad": "buffers",
    "Reduce Scatter": "buffers",
    "All Gather": "buffers",
    "Buffer": "buffers",
    # "Unsharded Param": params when they stay gathered forward-to-backward (shard_grad_op),
    # buffers when each unit is re-gathered on demand (full_shard): see fsdp_key_map().
}
PLAIN_KEYS = {
    "Parameter": "params",
    "Gradient": "grads",
    "Optstate": "optimizer",
    "Activation": "activations",
    "Temp": "activations",
    "Buffer": "buffers",
    "Other": "buffers",
    "Autocast copy": "buffers",
}
AUTOCAST_COPY = "Autocast copy"
"""bf16 weight copies autocast makes (and saves for backward): the analytic model's buffers."""


def fsdp_key_map(strategy: StrategySpec) -> dict[str, str]:
    gathered = "buffers" if strategy.reshard_after_forward else "params"
    return {**FSDP_KEYS, "Unsharded Param": gathered}


@dataclass(frozen=True, kw_only=True, slots=True)
class Peak:
    """Tracked bytes at the peak of one training step, by tracker category."""

    total: int
    categories: dict[str, int]
    phase: str
    """forward, backward or optimizer step."""


class _PeakOnly:
    """Mixin for the trackers: keep the global peak only (MemTracker's per-module peak
    bookkeeping walks every module on every op), with the phase it happened in. For DDP,
    `bucket_bytes` > 0 replaces the gradients by DDP's persistent buckets
    (gradient_as_bucket_view=True: the buckets are the grads and outlive zero_grad)."""

    bucket_bytes = 0
    grad_category = "Gradient"
    best: Peak | None = None

    def _update_peak_stats(self, peak_state: Any) -> None:  # overrides MemTracker's
        for snap in self._curr_mem_snap.values():  # type: ignore[attr-defined]
            cats = {str(getattr(k, "value", k)): v for k, v in snap.items() if k != _TOTAL}
            if self.bucket_bytes:
                cats[self.grad_category] = self.bucket_bytes
            total = sum(cats.values())
            if self.best is None or total > self.best.total:
                phase = (
                    "optimizer step"
                    if self._in_opt
                    # type: ignore[attr-defined]
                    else "backward"
                    if self._mod_tracker.is_bw
                    else "forward"
                )  # type: ignore[attr-defined]
                self.best = Peak(total=total, categories=self._relabel(cats), phase=phase + self._sub_phase())

    def _relabel(self, cats: dict[str, int]) -> dict[str, int]:
        return cats

    def _sub_phase(self) -> str:
        return ""


class _FSDPPeakTracker(_PeakOnly, FSDPMemTracker):
    """During a unit's post-backward, the reduce-scatter input (a fresh copy of the unit's grads
    in the reduce dtype) exists as "Temp" before FSDPMemTracker re-tags it at the collective,
    and the peak of a step is often that instant: there Temp is re-labelled Reduce Scatter (the
    only other temporaries then are one activation grad, small beside a unit's grads)."""

    def _in_post_backward(self) -> bool:
        return getattr(self, "_fsdp_state", None) == _FSDPState.POST_BW

    def _relabel(self, cats: dict[str, int]) -> dict[str, int]:
        if not self._in_post_backward() or not cats.get("Temp"):
            return cats
        rs = "Reduce Scatter"
        return {**cats, rs: cats.get(rs, 0) + cats["Temp"], "Temp": 0}

    def _sub_phase(self) -> str:
        return " (reduce-scatter)" if self._in_post_backward() else ""


class _PlainPeakTracker(_PeakOnly, MemTracker):
    """MemTracker for the single-process (DDP) trace. Casts of a parameter outside the optimizer
    step are autocast's bf16 weight copies (the only parameter casts wrap()'s DDP path makes):
    re-labelled from Activation to their own category."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        res = super().__torch_dispatch__(func, types, args, kwargs)
        if func is torch.ops.aten._to_copy.default and isinstance(args[0], torch.nn.Parameter) and not self._in_opt:
            tree_map_only(torch.Tensor, self._retag_copy, res)
        return res

    def _track_module_params_and_buffers(self, module: torch.nn.Module, install_grad_hooks: bool = True):
        # MemTracker registers a grad hook on every parameter, which raises on frozen ones:
        # mark those as hooked already (with handles that remove nothing).
        for p in module.parameters():
            if not p.requires_grad and self._param_to_grad_hook_handles.get(p) is None:
                self._param_to_grad_hook_handles[p] = (_NO_HANDLE, _NO_HANDLE)
        return super()._track_module_params_and_buffers(module, install_grad_hooks)

    def _retag_copy(self, t: torch.Tensor) -> None:
        winfo, _ = self._WINFO.get(t.untyped_storage(), (None, None))
        if winfo is not None and winfo.reftype != AUTOCAST_COPY:
            snap = self._curr_mem_snap[winfo.device]
            snap[winfo.reftype] -= winfo.mem_consumed
            snap[AUTOCAST_COPY] = snap.get(AUTOCAST_COPY, 0) + winfo.mem_consumed
            winfo.reftype = AUTOCAST_COPY


class _NoHandle:
    def remove(self) -> None:
        pass


_NO_HANDLE = _NoHandle()


def optimizer_factory(training: TrainingSpec):
    if training.optimizer == "sgd":
        return lambda params: torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=False)
    return lambda params: torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=False)


def mixed_precision_for(training: TrainingSpec) -> str | None:
    """wrap()'s mixed_precision for this precision preset: bf16-mixed -> "bf16"; bf16-pure and
    fp32 -> None (bf16-pure builds the model in bf16 instead)."""
    return "bf16" if training.compute_dtype == "bf16" and training.param_dtype == "fp32" else None


@contextlib.contextmanager
def fake_process_group(layout: Layout, hybrid: bool) -> Iterator[DistContext]:
    """Fake process group of the target world, this process as rank 0; mesh built now,
    outside fake mode; destroyed on exit."""
    if dist.is_initialized():
        raise SpecError(
            "a process group already exists in this process; run the traced estimate "
            "in a process of its own (e.g. `prism-strategy estimate`)"
        )
    dist.init_process_group("fake", rank=0, world_size=layout.world)
    ctx = DistContext(
        rank=0,
        local_rank=0,
        world_size=layout.world,
        nodes=layout.nodes,
        ranks_per_node=layout.ranks_per_node,
        device=torch.device("cpu"),
        backend="fake",
        launcher="single",
    )
    try:
        _ = ctx.mesh_2d if hybrid else ctx.mesh_1d
        yield ctx
    finally:
        dist.destroy_process_group()


def _materialise(model: torch.nn.Module) -> None:
    """A factory that built on the meta device: give its tensors (fake) storage on "cpu".
    Replaced one by one (module.to_empty would swap tensors, which fake mode's weakrefs
    forbid), through a memo so tied parameters stay tied."""
    new: dict[int, torch.Tensor] = {}
    for mod in model.modules():
        for table in (mod._parameters, mod._buffers):
            for name, t in table.items():
                if t is None or not t.is_meta:
                    continue
                if id(t) not in new:
                    data = torch.empty_like(t, device="cpu")
                    new[id(t)] = (
                        torch.nn.Parameter(data, t.requires_grad) if isinstance(t, torch.nn.Parameter) else data
                    )
                table[name] = new[id(t)]


class TraceSession:
    """Build and wrap once, then measure any number of micro-batches.

    with TraceSession(built_fn, training, layout, strategy) as s:
        peak = s.measure(4)
    """

    def __init__(
        self, build, training: TrainingSpec, layout: Layout, strategy: StrategySpec, ctx: DistContext | None = None
    ) -> None:
        """ctx: a fake process group the caller holds (fake_process_group), shared by sessions
        open side by side (traced/depth.py); None: the session makes its own."""
        if engine_of(strategy).traced_with == "analytic":
            raise SpecError(
                f"{strategy.name}: {strategy.engine} cannot run under fake tensors; use the analytic estimate"
            )
        self._build, self.training, self.layout, self.strategy = build, training, layout, strategy
        self._ctx = ctx
        self._fake = FakeTensorMode(allow_non_fake_inputs=False)
        self._stack = contextlib.ExitStack()
        self.built: BuiltModel | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.bucket_bytes = 0

    # -- setup ---------------------------------------------------------------------------
    def __enter__(self) -> "TraceSession":
        try:
            self._setup()
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @contextlib.contextmanager
    def _modes(self) -> Iterator[None]:
        """Fake mode and what the build and the steps run under, entered for each use (not held
        between them), so sessions open side by side each step in their own fake mode."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(warnings.catch_warnings())
            warnings.simplefilter("ignore")
            stack.enter_context(eager_hf_masks())
            stack.enter_context(self._fake)
            if self.training.param_dtype == "bf16":
                stack.enter_context(default_dtype(torch.bfloat16))
            yield

    def _setup(self) -> None:
        fake_pg = engine_of(self.strategy).traced_with == "fake_pg"
        ctx = self._ctx
        if fake_pg and ctx is None:
            ctx = self._stack.enter_context(fake_process_group(self.layout, self.strategy.hybrid))
        with self._modes():
            self._build_and_wrap(fake_pg, ctx)
            self._step(1)  # warm-up: optimizer state exists from here on

    def _build_and_wrap(self, fake_pg: bool, ctx: DistContext | None) -> None:
        self.built = self._build()
        model, t = self.built.module, self.training
        if fake_pg:
            _materialise(model)
            job = wrap(
                model,
                self.strategy,
                ctx=ctx,
                optimizer=optimizer_factory(t),
                block_types=self.built.block_types,
                mixed_precision=mixed_precision_for(t),
                ckpt_freq=t.ckpt_name,
                loss=t.loss,
            )
            self.optimizer = job.optimizer
        else:  # DDP: what wrap() does before DistributedDataParallel, on one process
            _materialise(model)
            blocks = find_blocks(model, self.built.block_types)
            apply_checkpointing(blocks, every=t.ckpt_name)
            apply_loss(model, t.loss)
            if mixed_precision_for(t):
                autocast_hooks(model, "cpu", torch.bfloat16)
            trainable = [p for p in model.parameters() if p.requires_grad]
            self.optimizer = optimizer_factory(t)(trainable)
            self.bucket_bytes = sum(p.numel() * p.element_size() for p in trainable)
        self.model = model

    # -- one step ------------------------------------------------------------------------
    def _step(self, micro_batch: int) -> None:
        assert self.built is not None and self.model is not None and self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)
        batch = self.built.make_batch(micro_batch)
        loss = self.built.loss(self.model, batch)
        loss.backward()
        del loss, batch
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def measure(self, micro_batch: int) -> Peak:
        """Peak tracked bytes of one full training step at this micro-batch."""
        assert self.model is not None
        if engine_of(self.strategy).traced_with == "fake_pg":
            tracker: Any = _FSDPPeakTracker(self.model, self.optimizer)
            tracker.grad_category = "Sharded Grad"
        else:
            tracker = _PlainPeakTracker()
            tracker.track_external(self.model, self.optimizer)
            tracker.bucket_bytes = self.bucket_bytes
        with self._modes(), tracker:
            self._step(micro_batch)
        if tracker.best is None:
            raise RuntimeError("the tracker saw no tensor operation")
        return tracker.best
