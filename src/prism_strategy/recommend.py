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
(ddp), then full sharding (most memory headroom), torch-native FSDP2 before DeepSpeed. The first
reason says which happened: the pick was fastest, or it sits in the band of the named faster one."""


def _root_wrap_note(sc: "Scenario", parts: tuple[Part, ...], o: "Option") -> str | None:
    s = get_strategy(o.strategy)
    if not s.impl.unit_wrapped:
        return None
    root = estimate_memory(parts, sc.training, sc.platform, sc.layout, s, o.micro_batch, wrap="root")
    extra = (root.total - o.memory.total) / GiB
    fits = "it would fit" if root.total <= sc.platform.usable_bytes else "it does not fit"
    return (f"this option wraps each transformer block; wrapping only the root (one flat unit) instead would add "
            f"{extra:.1f} GiB ({root.total / GiB:.1f} GiB at micro-batch {o.micro_batch}: {fits})")


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


FRUGAL = 0.05
"""A pick is called more memory-frugal than the faster option only when it needs 5% less per device."""


def ckpt_text(k: int) -> str:
    return {0: "no checkpointing", 1: "checkpointing every block", 2: "checkpointing every 2nd block",
            3: "checkpointing every 3rd block"}.get(k, f"checkpointing every {k}th block")


def batch_text(o: "Option") -> str:
    """micro-batch x accumulation = samples per step, and the checkpointing, of one option."""
    return (f"micro-batch {o.micro_batch} x accumulation {o.grad_accum} = {o.global_batch} samples per step, "
            f"{ckpt_text(o.ckpt_freq)}")


def _tie_break(pick: "Option", best: "Option") -> str:
    """Why the catalogue order put pick before the faster best, in words that are true of the two."""
    ps, bs = get_strategy(pick.strategy), get_strategy(best.strategy)
    if ps.engine == "ddp" and bs.engine != "ddp":
        return "the simpler option (plain DDP, nothing sharded)"
    if pick.memory.total < (1 - FRUGAL) * best.memory.total:
        return (f"the more memory-frugal option ({pick.memory.total / GiB:.1f} vs {best.memory.total / GiB:.1f} GiB "
                "per device)")
    if ps.engine == "fsdp2" and bs.engine == "deepspeed":
        return "the simpler option (torch-native FSDP2, no DeepSpeed engine)"
    return "the simpler option (fewer sharded states)"


def _first_reason(pick: "Option", best: "Option", feasible: list["Option"]) -> str:
    how = (f"{pick.samples_per_s:.2f} samples/s at {batch_text(pick)} ({pick.bound}-bound, exposed communication "
           f"{pick.comm_fraction:.0%} of the step)")
    if pick is best:
        return f"{pick.strategy}: highest predicted throughput of {len(feasible)} feasible options, {how}"
    faster = sum(o.samples_per_s > pick.samples_per_s for o in feasible)
    others = f"; {faster} options in the band are faster" if faster > 1 else ""
    return (f"{pick.strategy}: {how}; within the {TIE:.0%} uncertainty band of the fastest, {best.strategy} at "
            f"{best.samples_per_s:.2f} samples/s ({best.samples_per_s / pick.samples_per_s - 1:+.0%}{others}), "
            f"and chosen as {_tie_break(pick, best)}")


def _batch_lead(sc: "Scenario", pick: "Option", feasible: list["Option"]) -> str | None:
    """Without --global-batch each option runs its own largest micro-batch: say so when the pick
    leads its closest rival while running a larger batch."""
    if sc.training.global_batch is not None:
        return None
    rival = next((o for o in feasible if o is not pick), None)
    if rival is None or pick.samples_per_s < rival.samples_per_s or pick.global_batch <= rival.global_batch:
        return None
    return (f"{pick.strategy}'s lead over {rival.strategy} comes partly from a larger batch: {pick.global_batch} vs "
            f"{rival.global_batch} samples per step (each option at its largest micro-batch); pass --global-batch "
            "to compare them at one batch")


def recommend(sc: "Scenario", options: list["Option"]) -> tuple[str | None, list[str], list[str]]:
    feasible = sorted((o for o in options if o.feasible), key=lambda o: -o.samples_per_s)
    warnings = _warnings(sc)
    infeasible = [f"{o.strategy}: {o.why_not}" for o in options if not o.feasible]
    if not feasible:
        ckpt = "" if sc.training.ckpt_auto else "--ckpt-freq auto, "
        return None, [f"no strategy fits this scenario; try {ckpt}a shorter --seq-len, a smaller --micro-batch "
                      "or --global-batch, or more nodes", *infeasible], warnings
    best = feasible[0]
    tied = [o for o in feasible if o.samples_per_s >= best.samples_per_s * (1 - TIE)]
    order = strategy_names()
    pick = min(tied, key=lambda o: order.index(o.strategy))
    reasons = [_first_reason(pick, best, feasible)]
    if (lead := _batch_lead(sc, pick, feasible)) is not None:
        reasons.append(lead)
    runner = next((o for o in feasible[feasible.index(pick) + 1:]), None)
    if runner is not None:
        reasons.append(f"next below it: {runner.strategy}, {runner.samples_per_s:.2f} samples/s "
                       f"({runner.samples_per_s / pick.samples_per_s - 1:+.0%}) at {batch_text(runner)}")
    return pick.strategy, reasons + infeasible, warnings


def _warnings(sc: "Scenario") -> list[str]:
    t, lay, out = sc.training, sc.layout, []
    for v in check(RuleFacts(device=sc.platform.device, compile=t.compile, multi_node=lay.multi_node)):
        out.append(f"{v.rule.id}: {v.message}")
    return out
