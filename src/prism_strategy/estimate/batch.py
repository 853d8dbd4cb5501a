"""The batch an option runs at.

Global batch: micro-batch x grad accumulation x world = G exactly; an option takes the largest
micro-batch that divides G / world and fits (its memory ceiling: estimate/memory_runtime.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prism_strategy.specs.policies import divisors
from prism_strategy.specs.training import TrainingSpec

MAX_MICRO_BATCH_SHOWN = 4096
"""Cap on the micro-batch an option is evaluated at when it has that much room."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchChoice:
    max_micro_batch: int
    """Largest micro-batch that fits, with the accumulation chosen (accumulated grads live longer)."""
    micro_batch: int
    grad_accum: int


def resolve_batch(t: TrainingSpec, world: int, max_mb_at: Callable[[bool], int]) -> BatchChoice:
    """(max micro-batch, micro-batch, grad accumulation) for one option. `max_mb_at(accumulating)`
    is the option's memory ceiling. The request is assumed valid (`batch_problem` is None); with a
    global batch and nothing fitting, the smallest micro-batch is returned (the caller reports it)."""
    cap = lambda acc: min(max_mb_at(acc), MAX_MICRO_BATCH_SHOWN)  # noqa: E731
    if t.global_batch is None:
        ga = t.grad_accum or 1
        ceiling = cap(ga > 1)
        return BatchChoice(max_micro_batch=ceiling, micro_batch=t.micro_batch or max(1, ceiling), grad_accum=ga)
    per_rank = t.global_batch // world
    if t.micro_batch is not None or t.grad_accum is not None:
        mb = t.micro_batch or per_rank // t.grad_accum  # type: ignore[operator]
        return BatchChoice(max_micro_batch=cap(mb < per_rank), micro_batch=mb, grad_accum=per_rank // mb)
    plain = cap(False)
    if plain >= per_rank:
        return BatchChoice(max_micro_batch=plain, micro_batch=per_rank, grad_accum=1)
    accumulating = cap(True)
    mb = max((d for d in divisors(per_rank) if d < per_rank and d <= accumulating), default=1)
    return BatchChoice(max_micro_batch=accumulating, micro_batch=mb, grad_accum=per_rank // mb)
