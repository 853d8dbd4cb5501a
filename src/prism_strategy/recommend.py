"""Explain a plan: per-option notes, the ranking, and the reasons that decided it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prism_strategy.estimate.memory import estimate_memory, gathered_model_bytes
from prism_strategy.estimate.parts import Part
from prism_strategy.rules import RuleFacts, check
from prism_strategy.specs.cluster import GiB
from prism_strategy.strategies import get_strategy, strategy_names

if TYPE_CHECKING:
    from prism_strategy.planner import Option
    from prism_strategy.scenario import Scenario

TIE = 0.10
"""Options within 10% of the best predicted throughput are tied: an uncalibrated prediction is not
more accurate than that. Among tied options the catalogue order decides: the simpler engine first
(ddp), then full sharding (most memory headroom), torch-native FSDP2 before DeepSpeed."""


def _root_wrap_note(sc: "Scenario", parts: tuple[Part, ...], o: "Option") -> str | None:
    s = get_strategy(o.strategy)
    if not s.impl.unit_wrapped:
        return None
    root = estimate_memory(parts, sc.training, sc.platform, sc.layout, s, o.micro_batch, wrap="root")
    extra = (root.total - o.memory.total) / GiB
    fits = "fits" if root.total <= sc.platform.usable_bytes else "does not fit"
    return (f"wrapping only the root (one flat unit) adds {extra:.1f} GiB: {root.total / GiB:.1f} GiB at "
            f"micro-batch {o.micro_batch}, {fits}; wrap each transformer block")


def _loss_note(o: "Option") -> str | None:
    """The fp32 loss buffers (HF upcasts the whole micro-batch's logits) as the largest item."""
    label, b = (o.memory.largest_items(1) or [("", 0.0)])[0]
    if not label.startswith("loss:"):
        return None
    return (f"the fp32 loss buffers are the largest item ({b / GiB:.1f} GiB at micro-batch {o.micro_batch}: "
            "tokens x vocab x 12 bytes); a chunked or fused cross-entropy would free most of it")


def _notes(sc: "Scenario", parts: tuple[Part, ...], o: "Option") -> list[str]:
    s, t, notes = get_strategy(o.strategy), sc.training, []
    if s.param_shard != "none" and not s.reshard_after_forward:
        gathered = gathered_model_bytes(parts, t)
        notes.append(f"keeps the whole model gathered ({gathered / GiB:.1f} GiB) on each of "
                     f"{sc.layout.ranks_per_node} ranks per node from forward to backward")
    if (n := _root_wrap_note(sc, parts, o)) is not None:
        notes.append(n)
    if (n := _loss_note(o)) is not None:
        notes.append(n)
    if "static_graph" in s.impl.options and sc.model.mode != "e2e":
        notes.append(f"only the {sc.model.trainable_params / 1e6:.1f}M trainable params are all-reduced; "
                     "static_graph=True when every batch uses the same modalities")
    if (n := s.impl.precision_note(t.precision)) is not None:
        notes.append(n)
    if o.comm is not None and o.comm_s > 0:
        links = sorted({c.link for c in o.comm.collectives if c.seconds_per_step > 0})
        notes.append(f"{o.bound}-bound: communication {o.comm_s:.3f} s ({', '.join(links) or 'none'}) vs compute "
                     f"{o.compute_s:.3f} s per step; {o.exposed_comm_s:.3f} s exposed")
    return notes


def annotate(sc: "Scenario", parts: tuple[Part, ...], options: list["Option"]) -> None:
    for o in options:
        o.notes.extend(_notes(sc, parts, o))


def recommend(sc: "Scenario", options: list["Option"]) -> tuple[str | None, list[str], list[str]]:
    feasible = sorted((o for o in options if o.feasible), key=lambda o: -o.samples_per_s)
    warnings = _warnings(sc)
    infeasible = [f"{o.strategy}: {o.why_not}" for o in options if not o.feasible]
    if not feasible:
        return None, ["no strategy fits this scenario; try --ckpt-freq 1, a shorter --seq-len, "
                      "a smaller --micro-batch or more nodes", *infeasible], warnings
    best = feasible[0]
    tied = [o for o in feasible if o.samples_per_s >= best.samples_per_s * (1 - TIE)]
    order = strategy_names()
    pick = min(tied, key=lambda o: order.index(o.strategy))
    reasons = [f"{pick.strategy}: highest predicted throughput of {len(feasible)} feasible options, "
               f"{pick.samples_per_s:.2f} samples/s at micro-batch {pick.micro_batch} "
               f"({pick.bound}-bound, exposed communication {pick.comm_fraction:.0%} of the step)"]
    if pick is not best:
        reasons.append(f"{best.strategy} is predicted {best.samples_per_s / pick.samples_per_s - 1:+.0%}, inside the {TIE:.0%} "
                       "uncertainty of an uncalibrated prediction: the simpler / more memory-frugal strategy wins the tie")
    runner = next((o for o in feasible if o is not pick and o.strategy not in {t.strategy for t in tied}), None)
    if runner is not None:
        reasons.append(f"next: {runner.strategy}, {runner.samples_per_s:.2f} samples/s "
                       f"({runner.samples_per_s / pick.samples_per_s - 1:+.0%})")
    return pick.strategy, reasons + infeasible, warnings


def _warnings(sc: "Scenario") -> list[str]:
    t, lay, out = sc.training, sc.layout, []
    if t.global_batch is not None and t.micro_batch is not None and t.global_batch % (t.micro_batch * lay.world):
        out.append(f"global batch {t.global_batch} is not a multiple of micro-batch x world "
                   f"({t.micro_batch} x {lay.world}); gradient accumulation rounds it up")
    for v in check(RuleFacts(device=sc.platform.device, compile=t.compile, multi_node=lay.multi_node)):
        out.append(f"{v.rule.id}: {v.message}")
    return out
