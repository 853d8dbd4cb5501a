"""The checkpointing an option runs at (its batch: estimate/batch.py).

Checkpointing (`--ckpt-freq auto`): each option is
evaluated with every block checkpointed, every 2nd, none, and the other small divisors of the
block count; the fastest that fits at the batch is kept. One call, `estimate_searched`, prices
every candidate and returns the chosen OptionEstimate (it carries the checkpointing it was priced
at), so the planner enters estimate/ once per strategy.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from prism_strategy.estimate.option import BatchAt, OptionEstimate, estimate_option, estimate_step, timed_view

if TYPE_CHECKING:
    from prism_strategy.specs.parts import Part
    from prism_strategy.specs.scenario import Scenario
    from prism_strategy.strategies import StrategySpec

CKPT_DIVISORS_UP_TO = 4
"""Besides none (0), every block (1) and every 2nd (2): divisors of the block count up to this.
Larger k saves little memory over none and rarely wins; an explicit --ckpt-freq still pins any k."""


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


def estimate_searched(
    sc: "Scenario", s: "StrategySpec", parts: "tuple[Part, ...] | None" = None, *, viable: bool = True
) -> OptionEstimate:
    """estimate_option at the pinned ckpt_freq, or at each candidate for `--ckpt-freq auto`: the
    fastest that fits; when none fits, or the strategy is not viable whatever its checkpointing
    (viable=False: a rule blocks it, planning/planner.py), the one needing the least memory (its
    reason is the most useful)."""
    if not sc.training.ckpt_auto:
        return estimate_option(sc, s, parts=parts)
    tried = [estimate_option(with_ckpt(sc, k), s, parts=parts) for k in ckpt_candidates(sc.model.backbone.layers)]
    fits = [e for e in tried if e.oom is None] if viable else []
    if fits:  # ties go to less recompute: none, then the sparsest checkpointing
        return max(fits, key=lambda e: (e.step.samples_per_s, recompute_rank(e.ckpt_freq)))
    return min(tried, key=lambda e: e.memory_total)


def samples_per_s_at(
    sc: "Scenario",
    s: "StrategySpec",
    parts: "tuple[Part, ...]",
    micro_batch: int,
    grad_accum: int,
    ckpt_freq: int | str,
) -> float:
    """samples/s of s at a given batch and checkpointing (an option planned under another
    scenario, retimed: planning/env_advice.py), the sequence timed as estimate_option times it."""
    timed, timed_parts = timed_view(with_ckpt(sc, ckpt_freq), parts)
    at = BatchAt(micro_batch=micro_batch, grad_accum=grad_accum)
    return estimate_step(timed, s, at, parts=timed_parts).samples_per_s
