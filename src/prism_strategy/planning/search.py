"""The batch and checkpointing an option runs at.

Global batch: micro-batch x grad accumulation x world = G exactly; an option takes the largest
micro-batch that divides G / world and fits. Checkpointing (`--ckpt-freq auto`): each option is
evaluated with every block checkpointed, every 2nd, none, and the other small divisors of the
block count; the fastest that fits at the batch is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from prism_strategy.specs.training import TrainingSpec

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
    from prism_strategy.planning.scenario import Scenario
    from prism_strategy.strategies import StrategySpec

MAX_MICRO_BATCH_SHOWN = 4096
"""Cap on the micro-batch an option is evaluated at when it has that much room."""
CKPT_DIVISORS_UP_TO = 4
"""Besides none (0), every block (1) and every 2nd (2): divisors of the block count up to this.
Larger k saves little memory over none and rarely wins; an explicit --ckpt-freq still pins any k."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchChoice:
    max_micro_batch: int
    """Largest micro-batch that fits, with the accumulation chosen (accumulated grads live longer)."""
    micro_batch: int
    grad_accum: int


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def nearest_multiples(value: int, step: int) -> list[int]:
    """The multiples of step just below and above value (below omitted when it is 0)."""
    below, above = (value // step) * step, (value // step + 1) * step
    return [v for v in (below, above) if v > 0]


def batch_problem(t: TrainingSpec, world: int) -> str | None:
    """Why the requested batch cannot be run on `world` ranks exactly; None when it can."""
    g, mb, ga = t.global_batch, t.micro_batch, t.grad_accum
    if g is None:
        return None
    if g % world:
        near = " or ".join(str(v) for v in nearest_multiples(g, world))
        return (
            f"--global-batch {g} is not a multiple of the {world} ranks (micro-batch x grad accumulation x "
            f"world must equal it); nearest valid: {near}"
        )
    per_rank = g // world
    for name, v in (("--micro-batch", mb), ("--grad-accum", ga)):
        if v is not None and per_rank % v:
            ok = ", ".join(map(str, divisors(per_rank)))
            return (
                f"{name} {v} does not divide --global-batch {g} / {world} ranks = {per_rank} samples per rank; "
                f"use one of {ok}"
            )
    if mb is not None and ga is not None and mb * ga != per_rank:
        return (
            f"--micro-batch {mb} x --grad-accum {ga} x {world} ranks = {mb * ga * world}, not --global-batch {g}; "
            "drop one of the three"
        )
    return None


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


def ckpt_candidates(layers: int) -> list[int | str]:
    """Checkpointing tried by `--ckpt-freq auto`: none, selective (sac: torchtitan's per-op policy
    on every block), every block, every 2nd, and the other divisors of the block count up to
    CKPT_DIVISORS_UP_TO."""
    ks = {0, 1} | ({2} if layers >= 2 else set())
    ks |= {k for k in range(3, CKPT_DIVISORS_UP_TO + 1) if k <= layers and layers % k == 0}
    return [0, "sac", *sorted(ks - {0})]


def with_ckpt(sc: "Scenario", k: int | str) -> "Scenario":
    if k == "sac":
        return sc.with_training(replace(sc.training, ckpt_freq=1, ckpt_policy="sac"))
    return sc.with_training(replace(sc.training, ckpt_freq=int(k), ckpt_policy="full"))


def recompute_rank(k: int | str) -> tuple[int, int]:
    """Ties go to less recompute: none, then sparser full checkpointing, then sac (it recomputes
    less than every block but more than every 2nd block's share, roughly)."""
    if k == "sac":
        return (1, 0)
    return (2, 0) if k == 0 else (0, int(k))


def evaluate_searched(sc: "Scenario", s: "StrategySpec", parts, evaluate: Callable[..., "Option"]) -> "Option":
    """evaluate() at the pinned ckpt_freq, or at each candidate for `--ckpt-freq auto`: the fastest
    feasible one; when none is feasible, the one needing the least memory (its reason is the most useful)."""
    if not sc.training.ckpt_auto:
        return evaluate(sc, s, parts)
    tried = [evaluate(with_ckpt(sc, k), s, parts) for k in ckpt_candidates(sc.model.backbone.layers)]
    fits = [o for o in tried if o.feasible]
    if fits:  # ties go to less recompute: none, then the sparsest checkpointing
        return max(fits, key=lambda o: (o.samples_per_s, recompute_rank(o.ckpt_freq)))
    return min(tried, key=lambda o: o.memory.total if o.memory is not None else float("inf"))
