"""A deep stack traced at two shallow depths per kind of block, and extrapolated.

A traced step costs about half a second per block, so a 1,000-layer model would take minutes.
Identical blocks add the same tensors: each one more holds its sharded parameters, gradients,
optimizer state and saved activations, while what is held once (the gathered unit, the loss
buffers, the prefetch) does not grow. So each kind of block (a decoder's dense blocks, an MoE's
sparse ones, a vision encoder's) is traced at a shallow base depth and one period deeper, the
others held at their base, and the step's peak is

    peak(n) = peak(base) + sum over kinds of (n_kind - base_kind) / period x (peak(base + one period of
              that kind) - peak(base))

for the total and for each tracker category, as `plan` counts identical blocks once and
multiplies (TransformerSpec.stack_groups). The period is what repeats along the stack: 1, or the
checkpointing interval (every k-th block is checkpointed), times the sliding-window pattern of
Gemma 2/3 (transformers' layer_types); each base keeps its count's remainder, so the pattern of
the full stack is the pattern of the traced ones. tests/unit/traced/test_traced_depth.py holds
the extrapolation equal to the full trace of small stacks (4 and 6 layers, dense, MoE,
checkpointed, FSDP and DDP). A stack within one period of its base is traced whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prism_strategy.engines import engine_of
from prism_strategy.specs.hf_families import SLIDING_PATTERN
from prism_strategy.specs.model import MultimodalSpec
from prism_strategy.specs.training import TrainingSpec

MIN_DEPTH = 2
"""Blocks of a kind traced at least: with one block the first block is also the last (FSDP2
prefetches none and reshards none), so the step's shape is not yet the deep stack's."""

Counts = tuple[int, int, int]
"""(vision blocks, backbone dense blocks, backbone sparse blocks)."""


def period(model: MultimodalSpec, training: TrainingSpec) -> int:
    """Blocks after which the stack's pattern repeats (module docstring)."""
    every = training.ckpt_name
    p = every if isinstance(every, int) and every > 0 else 1
    for spec in filter(None, (model.vision, model.backbone)):
        if spec.sliding_layers and spec.hf_model_type in SLIDING_PATTERN:
            p = math.lcm(p, SLIDING_PATTERN[spec.hf_model_type])
    return p


def counts(model: MultimodalSpec) -> Counts:
    b = model.backbone
    return (model.vision.layers if model.vision else 0, b.layers - b.moe_layers, b.moe_layers)


def _base(n: int, step: int) -> int:
    """The shallowest count >= MIN_DEPTH (or n) left by removing whole periods from n."""
    if n <= MIN_DEPTH:
        return n
    return n - step * ((n - MIN_DEPTH) // step)


def with_counts(model: MultimodalSpec, c: Counts) -> MultimodalSpec:
    v, dense, sparse = c
    b = model.backbone
    backbone = dataclasses.replace(b, layers=dense + sparse, dense_layers=dense if b.moe else 0)
    vision = dataclasses.replace(model.vision, layers=v) if model.vision else None
    return dataclasses.replace(model, backbone=backbone, vision=vision)


def depth_plan(model: MultimodalSpec, training: TrainingSpec) -> list[tuple[Counts, float]] | None:
    """The depths to trace and the weight of each in the extrapolated peak (module docstring);
    None when the stack is shallow enough to trace whole."""
    full, step = counts(model), period(model, training)
    base = tuple(_base(n, step) for n in full)
    grown = [i for i, (n, b) in enumerate(zip(full, base)) if n - b > step]  # else one trace more costs as much
    if not grown:
        return None
    base = tuple(b if i in grown else n for i, (n, b) in enumerate(zip(full, base)))
    plan: list[tuple[Counts, float]] = [(base, 1.0)]  # type: ignore[list-item]
    for i in grown:
        k = (full[i] - base[i]) // step
        deeper = tuple(b + step if j == i else b for j, b in enumerate(base))
        plan.append((deeper, float(k)))  # type: ignore[arg-type]
        plan[0] = (plan[0][0], plan[0][1] - k)
    return plan


def describe(model: MultimodalSpec, plan: list[tuple[Counts, float]]) -> str:
    """One line: which depths were traced for which stack."""
    names = ("vision blocks", "dense blocks" if model.backbone.moe else "blocks", "sparse blocks")
    full = counts(model)
    traced = []
    for i, n in enumerate(full):
        depths = sorted({c[i] for c, _ in plan})
        if n and depths != [n]:
            traced.append(f"{n:,} {names[i]} from traces at {' and '.join(map(str, depths))}")
    return "extrapolated per block (traced/depth.py): " + ", ".join(traced)


@dataclass(frozen=True, slots=True)
class _Built:
    what: str


class DepthSession:
    """TraceSession's interface (enter, measure, built) over the shallow sessions of depth_plan,
    open side by side on one fake process group; measure() returns the extrapolated Peak."""

    def __init__(
        self,
        model: MultimodalSpec,
        plan: list[tuple[Counts, float]],
        make: Callable[[MultimodalSpec, Any], Any],
        strategy: Any,
        layout: Any,
    ) -> None:
        """make(spec, ctx) -> a TraceSession of that spec on the shared process group ctx."""
        self._model, self._plan, self._make = model, plan, make
        self._strategy, self._layout = strategy, layout
        self._stack = contextlib.ExitStack()
        self._sessions: list[tuple[Any, float]] = []
        self.built: _Built | None = None
        self.note = ""

    def __enter__(self) -> DepthSession:
        from prism_strategy.traced.run import fake_process_group

        try:
            ctx = None
            if engine_of(self._strategy).traced_with == "fake_pg":
                ctx = self._stack.enter_context(fake_process_group(self._layout, self._strategy.hybrid))
            for c, w in self._plan:
                s = self._stack.enter_context(self._make(with_counts(self._model, c), ctx))
                self._sessions.append((s, w))
        except BaseException:
            self._stack.close()
            raise
        first = self._sessions[0][0].built
        self.note = f"; {describe(self._model, self._plan)}"  # appended to the trace's method
        self.built = _Built(f"{first.what if first else self._model.name}{self.note}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def measure(self, micro_batch: int) -> Any:
        from prism_strategy.traced.run import Peak

        peaks = [(s.measure(micro_batch), w) for s, w in self._sessions]
        cats: dict[str, float] = {}
        for p, w in peaks:
            for k, v in p.categories.items():
                cats[k] = cats.get(k, 0.0) + w * v
        return Peak(
            total=round(sum(w * p.total for p, w in peaks)),
            categories={k: round(v) for k, v in cats.items()},
            phase=peaks[-1][0].phase,  # the deepest trace's
        )
