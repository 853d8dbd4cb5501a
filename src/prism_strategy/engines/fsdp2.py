"""FSDP2 (torch.distributed.fsdp.fully_shard): FSDP and HSDP (a 2-D mesh: replicate x shard).

What torch 2.13 does (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, _fsdp_param_group.py),
with runtime/wrap.py's units (each transformer block, then the root with what is left):
- forward: one all_gather_into_tensor per unit, every micro-step, in the param dtype of the
  MixedPrecisionPolicy; frozen parameters are gathered too (they are sharded);
- backward: units resharded after forward are gathered again, if gradients flow through them;
  the last block and the root are never resharded after forward (runtime/apply.py apply_fsdp);
- one reduce_scatter_tensor per unit that holds trainable parameters, in reduce_dtype, once
  per optimizer step (set_requires_gradient_sync(False) on the other micro-steps);
- HSDP: the reduce-scatter runs over the shard dim (ranks of a node), then an all_reduce of
  the reduced shard over the replicate dim (one rank per node);
- each parameter's dim 0 is padded to a multiple of the shard count.
Memory: sharded params in their storage dtype, gathered units in the compute dtype, a fresh
reduce-dtype buffer as each reduce-scatter's input (estimate/memory.py has the moments' story).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

from prism_strategy.engines.base import (
    TORCH_DTYPE,
    TORCH_DTYPE_BYTES,
    Engine,
    Moment,
    Rows,
    StepCollective,
    padded,
    part_modules,
    sharded_states,
    step_transient,
    trainable,
)
from prism_strategy.engines.runs import Runs
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.parts import Part, largest_block, root_unit
from prism_strategy.specs.training import DTYPE_BYTES, TrainingSpec

if TYPE_CHECKING:
    from prism_strategy.strategies import StrategySpec


def reduce_dtype(s: "StrategySpec", t: TrainingSpec) -> str:
    """torch dtype name gradients are reduced in: the option, else the training's grad dtype."""
    return TORCH_DTYPE[s.reduce_dtype or t.grad_dtype]


@dataclass(frozen=True, slots=True)
class Unit:
    """One fully_shard unit: elements (dim 0 padded to the shard count), trainable elements,
    whether gradients flow through it, and whether it is one of wrap()'s blocks (else the root)."""

    params: int
    trainable: int
    backward: bool
    block: bool


def fsdp_units(parts: tuple[Part, ...], shards: int, wrap: str) -> list[Unit]:
    """Units in forward order, as runtime/wrap.py makes them: the blocks find_blocks() returns
    (transformer layers, and what HF lists in _no_split_modules: SigLIP's embeddings and
    pooling head), then the root with everything else."""
    return [u for u, k in fsdp_unit_runs(parts, shards, wrap) for u in [u] * k]


def fsdp_unit_runs(parts: tuple[Part, ...], shards: int, wrap: str) -> list[tuple[Unit, int]]:
    """fsdp_units as (unit, how many in a row): a group of identical blocks is one unit's size,
    repeated (PartModules.block_groups); padding is per tensor, so the root's sums add up per group."""
    units: list[tuple[Unit, int]] = []
    root = root_train = 0
    for i, p in enumerate(parts):
        if p.lora_blocks and i and adapters_inside(parts[i - 1], p):
            continue  # counted with the blocks they sit in
        pm = part_modules(p)
        lora = adapters_inside(p, parts[i + 1]) if i + 1 < len(parts) else None
        extra = lora or [[] for _ in pm.block_groups]
        head_rest = pm.head[1:] if pm.head_unit else []
        groups = [(pm.embed, [], pm.embed_unit, 1)] + [(b, a, True, k) for (b, k), a in zip(pm.block_groups, extra)]
        groups += [(pm.head[:1] if pm.head_unit else pm.head, [], False, 1), (head_rest, [], True, 1)]
        for modules, adapters, unit, count in groups:
            if not modules:
                continue
            n, a = padded(modules, shards), padded(adapters, shards)
            if unit and wrap == "block":
                units.append((Unit(n + a, n + a if p.trains else a, p.backward, True), count))
            else:
                root, root_train = root + (n + a) * count, root_train + ((n + a) if p.trains else a) * count
    units.append((Unit(root, root_train, any(p.backward for p in parts), False), 1))
    return [(u, sum(k for _, k in g)) for u, g in groupby(units, key=lambda r: r[0])]


def adapters_inside(part: Part, nxt: Part) -> list[list[list[tuple[int, int]]]] | None:
    """The LoRA adapters' modules per block group of `part` when `nxt` holds them (specs/parts.py
    model_parts puts them right after the backbone), else None. peft puts lora_A / lora_B inside
    the adapted Linear (peft tuners/lora/layer.py LoraLayer.update_layer), so they are parameters
    of the block wrap() makes a unit, gathered with its frozen weights (torch
    distributed/fsdp/_fully_shard/_fsdp_param_group.py FSDPParamGroup: one all-gather of every
    parameter of the unit) and reduce-scattered alone (FSDPParamGroup.post_backward reduces only
    fsdp_params_with_grad); the census on tiny-llama r=4 checks it (docs/bench.md)."""
    if not nxt.lora_blocks:
        return None
    blocks, adapters = part_modules(part).block_groups, part_modules(nxt).block_groups
    if [k for _, k in blocks] != [k for _, k in adapters]:
        return None  # groups the adapter count merged (specs/lora.py adapter_blocks): units of their own
    return [mods for mods, _ in adapters]


def regathered(runs: list[tuple[Unit, int]]) -> list[tuple[Unit, int]]:
    """Blocks all-gathered again in backward under reshard_after_forward, as runs of units: every
    block gradients flow through but the last (never resharded), and the block just before the
    first of them: FSDP2 prefetches the unit that finished forward before the one running backward."""
    blocks = [(u, k) for u, k in runs if u.block]
    if not blocks:
        return []
    flowing = [(u, k - (i == len(blocks) - 1)) for i, (u, k) in enumerate(blocks) if u.backward]
    first = next((i for i, (u, _) in enumerate(blocks) if u.backward), None)
    if first is not None and first > 0:  # the run before holds no block gradients flow through
        flowing = [(blocks[first - 1][0], 1)] + flowing
    return [(u, k) for u, k in flowing if k > 0]


class FSDP2Engine(Engine):
    name = "fsdp2"
    title = "FSDP2"
    per_tensor_hooks = False
    traced_with = "fake_pg"
    options = ("reduce_dtype",)
    unit_wrapped = True
    world_on_mesh = True

    def states(self, parts, t, s, layout) -> Rows:
        return sharded_states(parts, t, s, layout)

    def moments(
        self,
        parts,
        t,
        s,
        layout,
        *,
        states,
        acts,
        reserve,
        wrap,
        accumulating,
        saved_acts=(),
        late_acts=(),
        step_impl="loop",
    ) -> list[Moment]:
        step = Moment("optimizer step", states + _step_rows(parts, t, s, layout, step_impl) + reserve, [])
        if wrap == "block":
            return _block_moments(parts, t, s, layout, states, acts, reserve, accumulating, list(late_acts)) + [step]
        return [Moment("start of backward", states + _root_wrap_rows(parts, t, s) + reserve, acts), step]

    def step_collectives(
        self,
        s: "StrategySpec",
        parts: tuple[Part, ...],
        t: TrainingSpec,
        layout: Layout,
        grad_accum: int = 1,
        wrap: str = "block",
    ) -> tuple[StepCollective, ...]:
        group, shards = ("node", layout.ranks_per_node) if s.hybrid else ("world", layout.world)
        if shards <= 1 and not (s.hybrid and layout.nodes > 1):
            return ()
        runs = fsdp_unit_runs(parts, shards, wrap)
        calls = sum(k for _, k in runs)
        ag_dtype = TORCH_DTYPE[t.compute_dtype]
        rd = reduce_dtype(s, t)
        out: list[StepCollective] = []

        def add(op, grp, size, dtype, elems, calls, phase, overlap, what, order: Runs):
            if calls:
                out.append(
                    StepCollective(
                        op=op,
                        group=grp,
                        group_size=size,
                        dtype=dtype,
                        calls=calls,
                        phase=phase,
                        bytes_per_call=elems * TORCH_DTYPE_BYTES[dtype] / calls,
                        overlappable=overlap,
                        what=what,
                        sizes=order.map(lambda n: n * TORCH_DTYPE_BYTES[dtype]),
                    )
                )

        # issue order: the root is gathered first (its pre-forward wraps the blocks') and reduced last
        # (its post-backward runs from the root's final callback); the blocks in between, backward reversed.
        # Identical blocks in a row are one run of units (a deep stack: a few runs, not one per block)
        root = runs[-1][0]
        add(
            "all_gather",
            group,
            shards,
            ag_dtype,
            sum(u.params * k for u, k in runs) * grad_accum,
            calls * grad_accum,
            "forward",
            calls > 1,
            "each unit's params, forward",
            Runs.of_runs([(root.params, 1)] + [(u.params, k) for u, k in runs[:-1]]),
        )
        if s.reshard_after_forward:
            again = regathered(runs)
            add(
                "all_gather",
                group,
                shards,
                ag_dtype,
                sum(u.params * k for u, k in again) * grad_accum,
                sum(k for _, k in again) * grad_accum,
                "backward",
                True,
                "resharded blocks re-gathered in backward",
                Runs.of_runs((u.params, k) for u, k in reversed(again)),
            )
        reduced = [(u, k) for u, k in runs if u.trainable > 0]
        order = Runs.of_runs(
            [(u.trainable, k) for u, k in reversed(reduced) if u.block]
            + [(u.trainable, k) for u, k in reduced if not u.block]
        )
        reduced_elems = sum(u.trainable * k for u, k in reduced)
        add(
            "reduce_scatter",
            group,
            shards,
            rd,
            reduced_elems,
            len(order),
            "backward",
            True,
            "each unit's gradients",
            order,
        )
        if s.hybrid and layout.nodes > 1:
            add(
                "all_reduce",
                "across_nodes",
                layout.nodes,
                rd,
                reduced_elems / shards,
                len(order),
                "backward",
                True,
                "reduced shards across the replicas",
                order.map(lambda n: n / shards),
            )
        return tuple(out)

    def describe(self, s) -> str:
        return f"fully_shard(reshard_after_forward={s.reshard_after_forward}, reduce_dtype={s.reduce_dtype or 'grad dtype'})"


# --- memory moments (estimate/memory.py module docstring) -----------------------------------
def gathered_model_bytes(parts: tuple[Part, ...], t: TrainingSpec) -> float:
    """The whole model gathered in the compute dtype (shard_grad_op, forward to backward)."""
    return sum(p.params for p in parts) * t.compute_bytes


def _gathered_whole_model(parts: tuple[Part, ...], t: TrainingSpec) -> tuple[str, str, float]:
    return (
        "params",
        f"gathered params ({t.compute_dtype}, whole model, forward to backward)",
        gathered_model_bytes(parts, t),
    )


def _root_wrap_rows(parts: tuple[Part, ...], t: TrainingSpec, s: "StrategySpec") -> Rows:
    """One flat unit: its whole unsharded grads and their reduce-dtype copy, and the whole model
    gathered (full_shard re-gathers it in backward; shard_grad_op never lets it go)."""
    pt = trainable(parts)
    rows: Rows = [
        (
            "buffers",
            "unsharded grads of the single root unit (+ reduce-scatter copy)",
            pt * (t.compute_bytes + t.grad_bytes),
        )
    ]
    if s.reshard_after_forward:
        return rows + [
            (
                "buffers",
                "whole model re-gathered in backward (root-only wrap)",
                sum(p.params for p in parts) * t.compute_bytes,
            )
        ]
    return rows + [_gathered_whole_model(parts, t)]


def _step_rows(parts: tuple[Part, ...], t: TrainingSpec, s: "StrategySpec", layout: Layout, impl: str) -> Rows:
    """The optimizer steps the local shards (DTensors: foreach ops run on each local tensor), every
    unit resharded after backward: each trainable tensor's dim 0 padded to the shard count, then split."""
    n = s.degree(s.optim_shard, layout)
    local = _local_totals(parts, n)
    return step_transient(local, t, impl, DTYPE_BYTES[t.optim_state_dtype], f" (local shards, 1/{n})", totals=True)


@functools.lru_cache(maxsize=64)
def _local_totals(parts: tuple[Part, ...], n: int) -> tuple[float, float, int]:
    """sum_and_largest of the local shards, a product per group of identical blocks."""
    groups = _local_shards(parts, n)
    return (
        sum(sum(shards) * k for shards, k in groups),
        max((max(shards, default=0) for shards, _ in groups), default=0),
        sum(len(shards) * k for shards, k in groups),
    )


@functools.lru_cache(maxsize=32)  # bounded: one entry holds a shard per tensor of each distinct module group
def _local_shards(parts: tuple[Part, ...], n: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """Each trainable tensor's local shard (dim 0 padded to n, then split), as (a group's shards,
    how many times in a row: PartModules.groups); cached: the planner asks for it at
    every micro-batch it tries."""
    return tuple(
        (tuple(-(-rows // n) * (numel // rows) for m in mods for numel, rows in m), k)
        for p in parts
        if p.trains
        for mods, k in part_modules(p).groups()
    )


def _block_moments(
    parts: tuple[Part, ...],
    t: TrainingSpec,
    s: "StrategySpec",
    layout: Layout,
    states: Rows,
    acts: Rows,
    reserve: Rows,
    accumulating: bool,
    late_acts: Rows,
) -> list[Moment]:
    """Per-block units: start of backward, late backward, end of backward."""
    e, gb = t.compute_bytes, t.grad_bytes
    params_optim = [r for r in states if r[0] != "grads"]
    grads = [r for r in states if r[0] == "grads"]
    block, root = largest_block(parts), root_unit(parts)
    train_block = largest_block(tuple(p for p in parts if p.trains))
    root_trainable = sum((p.spec.root_params if p.spec else p.params) for p in parts if p.trains)
    pt, dg = trainable(parts), s.degree(s.grad_shard, layout)
    block_grads = [
        ("grads", f"grads of every unit but the root ({t.grad_dtype}, 1/{dg})", (pt - root_trainable) * gb / dg)
    ]  # the root reduces last
    # tied or not, the head's grad is made first in backward and kept (as .grad, or as autograd's
    # buffer waiting for the embedding's share) until the root unit reduces
    head = sum(
        p.spec.vocab * p.spec.hidden for p in parts if p.trains and p.spec is not None and p.spec.kind == "decoder"
    )
    gathered: Rows = [
        ("buffers", "root unit gathered (embeddings, LM head)", root * e),
        ("buffers", "all-gather of the largest block + prefetch", 2 * block * e),
    ]
    start = params_optim + (grads if accumulating else [])
    start += gathered if s.reshard_after_forward else [_gathered_whole_model(parts, t)]
    start += [("buffers", "first block's unsharded grads", train_block * e)]
    late = (
        params_optim
        + block_grads
        + gathered
        + [
            ("buffers", "one block's unsharded grads + reduce-scatter copy", train_block * (e + gb)),
            ("buffers", "LM head's unsharded grad (kept until the root reduces, last)", head * e),
        ]
    )
    end = (
        params_optim
        + block_grads
        + [("buffers", "root unit unsharded grads + reduce-scatter copy (reduced last)", root_trainable * (e + gb))]
    )
    if any(p.trains and p.spec is not None and p.spec.tied_embeddings for p in parts):
        # observed, torch 2.13 (traces and a real gloo run): with a tied LM head the root's
        # gathered params are still allocated when its reduce-scatter runs
        end.append(("buffers", "root unit still gathered (tied LM head)", root * e))
    return [
        Moment("start of backward", start + reserve, acts),
        Moment("late backward", late + reserve, late_acts),
        Moment("end of backward", end + reserve, []),
    ]
