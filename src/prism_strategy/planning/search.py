"""The checkpointing an option runs at (its batch: estimate/batch.py).

Checkpointing (`--ckpt-freq auto`): each option is
evaluated with every block checkpointed, every 2nd, none, and the other small divisors of the
block count; the fastest that fits at the batch is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
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
