"""The engine protocol: what every data-parallel engine (DDP, FSDP2, DeepSpeed) answers.

An engine owns, for a named strategy (strategies.py: engine + options):
- its model states and memory moments (estimate/memory.py sums them);
- the collectives of one optimizer step (`step_collectives`; estimate/comm.py prices them and
  `census` holds them against what the real engine issued);
- the emitted engine config (`engine_config`: ds_config),
  and the rule facts it contributes (`facts`).
Prediction code here never imports torch; `apply` imports it when called.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from prism_strategy.engines.runs import Runs
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import DTYPE_BYTES, OPTIMIZER_STATES, TrainingSpec

if TYPE_CHECKING:
    from prism_strategy.strategies import StrategySpec

FP32 = 4
MiB = 2**20
Rows = list[tuple[str, str, float]]
TORCH_DTYPE = {"fp32": "float32", "bf16": "bfloat16"}
TORCH_DTYPE_BYTES = {TORCH_DTYPE[k]: n for k, n in DTYPE_BYTES.items()}
"""specs/training.py DTYPE_BYTES keyed by torch's dtype names (what a collective records)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepCollective:
    """One kind of collective an optimizer step issues, as census records it."""

    op: Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast"]
    group: Literal["world", "node", "across_nodes"]
    group_size: int
    """Ranks in one such group."""
    dtype: str
    """torch dtype name without "torch.": "float32", "bfloat16"."""
    bytes_per_call: float
    """Census payload: all_reduce the tensor; all_gather the gathered output; reduce_scatter the
    unscattered input (mean over the calls)."""
    calls: int
    """Per optimizer step, every micro-step of gradient accumulation included."""
    phase: Literal["forward", "backward", "step"]
    overlappable: bool
    what: str = ""
    """What it moves, for people ("gradient buckets", "per-block all-gather", ...)."""
    sizes: Runs = Runs()
    """Bytes of each call of one micro-step in the order they are issued, where they differ (FSDP2's
    root unit and its blocks, DDP's buckets): estimate/overlap.py's schedule. Empty: all bytes_per_call.
    Run-length encoded (engines/runs.py): a deep stack's equal per-block calls are one run."""

    @property
    def bytes(self) -> float:
        return self.bytes_per_call * self.calls


@dataclass(frozen=True, slots=True)
class Moment:
    """Tensors live at one moment of the step: fixed rows plus rows per sample of micro-batch."""

    name: str
    fixed: Rows
    per_sample: Rows

    def total(self, micro_batch: int) -> float:
        return sum(b for *_, b in self.fixed) + micro_batch * sum(b for *_, b in self.per_sample)


class Engine(ABC):
    """One data-parallel engine. Subclasses are stateless singletons (engines/__init__.py)."""

    name: ClassVar[str]
    title: ClassVar[str]
    """The name people know it by ("DeepSpeed")."""
    per_tensor_hooks: ClassVar[bool] = True
    """A per-parameter autograd hook / AccumulateGrad runs on the host each backward (DDP, DeepSpeed)."""
    traced_with: ClassVar[Literal["fake_pg", "single_process", "analytic"]] = "analytic"
    """How traced/estimate.py can trace it: fake process group, one process, or not at all."""
    options: ClassVar[tuple[str, ...]] = ()
    """wrap() options only this engine honours (others warn that they are ignored)."""
    grads_are_bucket_views: ClassVar[bool] = False
    """Gradients live inside the engine's communication buckets (DDP gradient_as_bucket_view):
    zeroing them in place keeps the buckets, set_to_none would not free them."""
    bf16_pure_in_config: ClassVar[bool] = False
    """Its bf16-pure is its bf16 mode plus keys of its own config (engine_config(precision=
    "bf16-pure"): DeepSpeed's bf16 master weights and optimizer states), not a model cast to bf16;
    the others run bf16-pure on bf16 parameters (bench's worker)."""
    declares_static_graph: ClassVar[bool] = False
    """The caller can declare the graph fixed (DDP static_graph=True): the plan and emit say when."""
    unit_wrapped: ClassVar[bool] = False
    """Wraps transformer blocks as units (FSDP2): wrapping only the root is a rule fact."""
    world_on_mesh: ClassVar[bool] = False
    """Its world collectives run on the DeviceMesh's group (FSDP2's 1-D mesh), not the default
    process group (DDP, DeepSpeed): what commbench replays them on."""
    config_file: ClassVar[str | None] = None
    """The engine's own config file, written by emit and passed to wrap (ds_config.json)."""
    builds_cpu_ops: ClassVar[bool] = False
    """Builds a C++ op on first use on CPU (DeepSpeed's shm comm op, torch cpp_extension JIT):
    bench builds it once before ranks start (bench/launch/ds_ops.py)."""

    # --- prediction ---------------------------------------------------------------------
    @abstractmethod
    def states(self, parts: tuple[Part, ...], t: TrainingSpec, s: "StrategySpec", layout: Layout) -> Rows:
        """Params, grads and optimizer state per device, once the first step has run."""

    @abstractmethod
    def moments(
        self,
        parts: tuple[Part, ...],
        t: TrainingSpec,
        s: "StrategySpec",
        layout: Layout,
        *,
        states: Rows,
        acts: Rows,
        reserve: Rows,
        wrap: str,
        accumulating: bool,
        saved_acts: Rows = (),
        late_acts: Rows = (),
        step_impl: str = "loop",
    ) -> list[Moment]:
        """The moments of one step that can hold the peak. acts: per-sample activations at the
        start of backward (with the loss / recompute transient); saved_acts: without it;
        late_acts: what is still alive when the top part's bottom block runs backward.
        step_impl: the optimizer implementation that runs (TrainingSpec.optimizer_impl_on)."""

    def residual_bytes(self, s: "StrategySpec", t: TrainingSpec) -> int:
        """Bytes per element of the residual stream saved between blocks."""
        return t.compute_bytes

    @abstractmethod
    def step_collectives(
        self,
        s: "StrategySpec",
        parts: tuple[Part, ...],
        t: TrainingSpec,
        layout: Layout,
        grad_accum: int = 1,
        wrap: str = "block",
    ) -> tuple[StepCollective, ...]:
        """Every collective of one optimizer step (grad_accum micro-steps)."""

    # --- runtime, emit, rules -----------------------------------------------------------

    def engine_config(
        self,
        s: "StrategySpec",
        *,
        micro_batch: int,
        world_size: int,
        grad_accum: int = 1,
        precision: str = "bf16-mixed",
    ) -> dict[str, Any] | None:
        """The engine's own config file (DeepSpeed's ds_config); None when it has none."""
        return None

    def facts(self, s: "StrategySpec", *, has_blocks: bool | None = None) -> dict[str, Any]:
        """Rule facts this engine contributes (rules.RuleFacts fields). has_blocks: transformer
        blocks were found in the model (None: not known at this stage)."""
        root_only = None if has_blocks is None or not self.unit_wrapped else not has_blocks
        return {"engine": self.name, "reshard_or_sharded": s.sharded, "root_only_wrap": root_only}

    def precision_note(self, precision: str) -> str | None:
        """How this engine runs `precision` when it differs from what was asked."""
        return None

    def emit_notes(self, s: "StrategySpec", *, precision: str, world: int, nodes: int) -> list[str]:
        """What `emit` should tell the user about this engine's files."""
        return []

    def describe(self, s: "StrategySpec") -> str:
        """Engine options, one line, for Job.describe()."""
        return s.torch_form


# --- helpers shared by the engines --------------------------------------------------------
def trainable(parts: tuple[Part, ...]) -> int:
    return sum(p.trainable for p in parts)


def sharded_states(parts: tuple[Part, ...], t: TrainingSpec, s: "StrategySpec", layout: Layout) -> Rows:
    """torch engines (DDP, FSDP2): each state in its preset dtype, divided over its shard group."""
    pt, pf = trainable(parts), sum(p.frozen for p in parts)
    dp, dg, do = (s.degree(g, layout) for g in (s.param_shard, s.grad_shard, s.optim_shard))
    return [
        ("params", f"trainable params ({t.param_dtype}, 1/{dp})", pt * t.param_bytes / dp),
        ("params", f"frozen params ({t.compute_dtype}, 1/{dp})", pf * t.compute_bytes / dp),
        ("grads", f"grads ({t.grad_dtype}, 1/{dg})", pt * t.grad_bytes / dg),
        (
            "optimizer",
            f"{t.optimizer} state ({t.optim_state_dtype}{', + fp32 master' if t.master_weights else ''}, 1/{do})",
            pt * t.optim_bytes / do,
        ),
    ]


def sum_and_largest(tensors: Sequence[float]) -> tuple[float, float, int]:
    """(sum, largest, count) of tensor sizes: all step_transient reads of them (exact ints kept)."""
    return sum(tensors), max(tensors, default=0), len(tensors)


def step_transient(
    tensors: Sequence[float] | tuple[float, float, int],
    t: TrainingSpec,
    impl: str,
    state_bytes: int,
    what: str = "",
    *,
    totals: bool = False,
) -> Rows:
    """The optimizer's own temporaries inside step(), for the tensors (elements) it updates on a
    rank, with state in `state_bytes` per element. torch 2.13, torch/optim/adam.py (AdamW is Adam
    with decoupled weight decay, applied in place):
    - foreach (_multi_tensor_adam): `exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)`
      allocates one new tensor per state tensor of the (device, dtype) group, whole, and keeps it
      through the in-place div_/add_ and the addcdiv_ (every other op is in place): the group's
      state-sized temporary. One param group of one dtype is assumed (the factory's parameters);
    - loop (_single_tensor_adam): `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`:
      the sqrt and the quotient of one tensor are both alive for the division: two of the largest;
    - fused (_fused_adamw_): one kernel updates in place, no temporaries.
    SGD (momentum, no weight decay; torch/optim/sgd.py) updates its buffer in place: none."""
    total, largest, count = tensors if totals else sum_and_largest(tensors)  # totals: sum_and_largest's already
    if t.optimizer != "adamw" or not count or impl == "fused":
        return []
    if impl == "foreach":
        return [
            (
                "buffers",
                f"foreach AdamW temporary: _foreach_sqrt of the whole state group{what}",
                total * state_bytes,
            )
        ]
    return [
        (
            "buffers",
            f"per-tensor AdamW temporaries: sqrt + quotient of the largest tensor{what}",
            2 * largest * state_bytes,
        )
    ]


def adam_states(t: TrainingSpec) -> int:
    return OPTIMIZER_STATES[t.optimizer]


Tensor = tuple[int, int]
"""(elements, rows): a parameter tensor's size and its dim 0 (FSDP2 pads dim 0 to the shard count)."""


@dataclass(frozen=True, slots=True)
class PartModules:
    """A part's parameter tensors grouped by owning module, in forward order. `embed` and `head`
    are the modules outside the blocks; `embed_unit` / `head_unit`: HF lists them in
    _no_split_modules (SigLIP's and CLIP's vision embeddings, SigLIP's pooling head), so wrap()
    makes them units."""

    embed: list[list[Tensor]]
    block_groups: tuple[tuple[list[list[Tensor]], int], ...]
    """The transformer blocks as (a block's modules, how many such blocks in a row), bottom to top
    (TransformerSpec.stack_groups; an MoE stack mixes dense and sparse blocks): a cost per block is
    computed once per group and multiplied, so nothing here grows with the layer count."""
    head: list[list[Tensor]]
    embed_unit: bool = False
    head_unit: bool = False
    """The head's modules after the first (the post-norm) are one unit (SigLIP's pooling head)."""

    @property
    def blocks(self) -> list[list[list[Tensor]]]:
        """Each block's modules, one entry per block: for tests on small models (it grows with the
        layer count; the engines read `groups`)."""
        return [mods for mods, n in self.block_groups for _ in range(n)]

    def forward_order(self) -> list[list[Tensor]]:
        """Every module, one entry per module of every block: for tests on small models."""
        return self.embed + [m for b in self.blocks for m in b] + self.head

    def groups(self) -> list[tuple[list[list[Tensor]], int]]:
        """The modules in forward order as (modules, how many times in a row): the embedding, each
        group of identical blocks (block_groups), the head. A cost per group, times its count."""
        return [(mods, n) for mods, n in [(self.embed, 1), *self.block_groups, (self.head, 1)] if mods and n]


def _linear(out: int, inp: int, bias: bool) -> list[Tensor]:
    return [(out * inp, out)] + ([(out, out)] if bias else [])


def part_modules(part: Part) -> PartModules:
    """Every module of a part with its tensors: the spec's module lists (specs/model.py, the layouts
    transformers builds); the projector is LLaVA's Linear + GELU + Linear."""
    if part.lora_blocks:  # LoRA adapters (specs/lora.py): lora_A (r, in) and lora_B (out, r) per adapted Linear
        groups = tuple(
            ([[(r * i, r)] for r, i, _ in mods] + [[(o * r, o)] for r, _, o in mods], n) for mods, n in part.lora_blocks
        )
        return PartModules(embed=[], block_groups=groups, head=[])
    if part.spec is None:
        i, o = part.widths
        return PartModules(embed=[_linear(o, i, True), _linear(o, o, True)], block_groups=(), head=[])
    sp = part.spec
    vision = sp.kind == "vision"
    return PartModules(
        embed=sp.embed_modules(),
        block_groups=tuple(sp.stack_groups),
        head=sp.head_modules(),
        embed_unit=vision,
        head_unit=vision and sp.pooling_head,
    )


def module_groups(part: Part) -> list[tuple[list[list[Tensor]], int]]:
    """A part's modules as PartModules.groups: (modules, how many times in a row), in forward order."""
    return part_modules(part).groups()


def numels(modules: list[list[Tensor]]) -> list[int]:
    return [n for m in modules for n, _ in m]


def padded(modules: list[list[Tensor]], shards: int) -> int:
    """Elements once each tensor's dim 0 is padded to a multiple of `shards` (FSDP2)."""
    return sum(-(-rows // shards) * shards * (n // rows) for m in modules for n, rows in m)


def ceil_div(a: float, b: float) -> int:
    return max(1, math.ceil(a / b)) if a > 0 else 0
