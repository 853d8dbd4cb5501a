"""Explain a plan: per-option notes, the ranking, and the reasons that decided it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from prism_strategy.engines import Engine, engine_of
from prism_strategy.estimate.entry import LATE, BatchAt, gathered_model_bytes, measured_nodes, memory_at
from prism_strategy.planning.advice import blocking_rules, nothing_viable_advice
from prism_strategy.planning.followup import bench_command, commbench_command
from prism_strategy.rules import RuleFacts, check
from prism_strategy.specs.cluster import GiB
from prism_strategy.specs.parts import Part
from prism_strategy.strategies import StrategySpec, all_strategies, get_strategy

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
    from prism_strategy.specs.scenario import Scenario

TIE = 0.10
"""The uncertainty band: an option is tied with the fastest when the fastest is at most 10% faster
(an uncalibrated prediction is not more accurate than that)."""

FRUGAL = 0.05
"""Room that counts: in the band, a max micro-batch at least 5% larger."""

CLEARLY_FASTER = TIE / 2
"""Speed that counts between two options: more than half the band faster (a smaller difference
is below what the fits resolve)."""

RANKING_RULE = (
    "an option is dominated when another feasible option needs no more memory per device and is clearly faster "
    f"(by more than {CLEARLY_FASTER:.0%}); a dominated option is never picked; options the fastest outruns by at "
    f"most {TIE:.0%} are tied; among the tied options that nothing dominates, the simplest engine (DDP, then torch FSDP2, then DeepSpeed) wins, and "
    f"among its options the fastest, unless another has a max micro-batch at least {FRUGAL:.0%} larger (room to "
    "grow the batch; memory alone decides nothing between options that both fit)"
)
"""The ranking rule, stated once: the Markdown report and docs/plan_output.md quote it; pick()
below applies it."""


def _root_wrap_note(sc: "Scenario", parts: tuple[Part, ...], o: "Option", s: StrategySpec, usable: float) -> str | None:
    at = BatchAt(micro_batch=o.micro_batch, grad_accum=o.grad_accum)  # the option's own accumulation
    wrapped = memory_at(sc, s, at, parts=parts, wrap="root")
    root = wrapped.memory_total
    extra = (root - o.memory_total) / GiB
    # judged as options are: reserved at the limit (estimate/memory_runtime.py)
    fits = "it would fit" if wrapped.device_peak_bytes <= usable else "it does not fit"
    return (
        f"this option wraps each transformer block; wrapping only the root (one flat unit) instead would add "
        f"{extra:.1f} GiB ({root / GiB:.1f} GiB at micro-batch {o.micro_batch}: {fits})"
    )


def _loss_note(o: "Option") -> str | None:
    """The fp32 loss buffers (HF upcasts the whole micro-batch's logits) as the largest item."""
    label, b = (o.memory.largest_items(1) or [("", 0.0)])[0]
    if not label.startswith("loss:"):
        return None
    return (
        f"the fp32 loss buffers are the largest item ({b / GiB:.1f} GiB at micro-batch {o.micro_batch}: "
        "tokens x vocab x 12 bytes); a chunked or fused cross-entropy would free most of it"
    )


def _notes(
    sc: "Scenario",
    parts: tuple[Part, ...],
    o: "Option",
    s: StrategySpec,
    engine: Engine,
    precision_note: str | None,
    usable: float,
) -> list[str]:
    notes: list[str] = []
    if s.param_shard != "none" and not s.reshard_after_forward:
        gathered = gathered_model_bytes(sc, parts)
        notes.append(
            f"keeps the whole model gathered ({gathered / GiB:.1f} GiB) on each of "
            f"{sc.layout.ranks_per_node} ranks per node from forward to backward"
        )
    if engine.unit_wrapped and (n := _root_wrap_note(sc, parts, o, s, usable)) is not None:
        notes.append(n)
    if (n := _loss_note(o)) is not None:
        notes.append(n)
    if engine.declares_static_graph and sc.model.mode != "e2e":
        notes.append(
            f"only the {sc.model.trainable_params / 1e6:.1f}M trainable params are all-reduced; "
            "static_graph=True when every batch uses the same modalities"
        )
    if precision_note is not None:
        notes.append(precision_note)
    if o.comm is not None and o.comm_s > 0:
        links = sorted({c.link for c in o.comm.collectives if c.seconds_per_step > 0})
        notes.append(
            f"{o.bound}-bound: communication {o.comm_s:.3f} s ({', '.join(links) or 'none'}) vs compute "
            f"{o.compute_s:.3f} s per step; {o.exposed_comm_s:.3f} s exposed"
        )
    if (wait := o.provenance.get("sync_wait")) is not None:
        notes.append(wait.split(" (fitted", 1)[0])
    return notes


def annotate(sc: "Scenario", parts: tuple[Part, ...], options: list["Option"]) -> None:
    """Each option's notes; its strategy, engine and the engine's precision note looked up once,
    the usable memory read once."""
    usable = sc.platform.usable_bytes
    specs = [get_strategy(o.strategy) for o in options]
    engines = [engine_of(s) for s in specs]
    precision = [e.precision_note(sc.training.precision) for e in engines]
    for o, s, engine, note in zip(options, specs, engines, precision):
        o.notes.extend(_notes(sc, parts, o, s, engine, note, usable))


def ckpt_text(k: int | str) -> str:
    if k == "sac":
        return "selective checkpointing (sac) on every block"
    return {
        0: "no checkpointing",
        1: "checkpointing every block",
        2: "checkpointing every 2nd block",
        3: "checkpointing every 3rd block",
    }.get(k, f"checkpointing every {k}th block")


def batch_text(o: "Option") -> str:
    """micro-batch x accumulation = samples per step, and the checkpointing, of one option."""
    return (
        f"micro-batch {o.micro_batch} x accumulation {o.grad_accum} = {o.global_batch} samples per step, "
        f"{ckpt_text(o.ckpt_freq)}"
    )


def engine_ranks(specs: tuple[StrategySpec, ...]) -> dict[str, int]:
    """Simplicity of each strategy's engine, by name: the engine's first position in the registry
    (DDP's engine, then torch's FSDP2, then DeepSpeed, as the catalogue lists them)."""
    first: dict[str, int] = {}
    return {s.name: first.setdefault(s.engine, i) for i, s in enumerate(specs)}


def dominates(a: "Option", b: "Option") -> bool:
    """RANKING_RULE's dominance: a needs no more memory and is clearly faster. Less memory alone
    does not dominate: between two options that both fit it decides nothing."""
    return a.memory_total <= b.memory_total and a.samples_per_s > (1 + CLEARLY_FASTER) * b.samples_per_s


def in_band(o: "Option", best: "Option") -> bool:
    """o is tied with best: best is at most TIE faster."""
    return best.samples_per_s <= o.samples_per_s * (1 + TIE)


def pick(feasible: list["Option"], registry: tuple[StrategySpec, ...] | None = None) -> "Option":
    """RANKING_RULE applied. `feasible` need not be sorted; equal options go by the registry's order
    (registry: all_strategies(), when the caller has it)."""
    specs = registry or all_strategies()
    order = {s.name: i for i, s in enumerate(specs)}
    ranks = engine_ranks(specs)
    ranked = sorted(feasible, key=lambda o: (-o.samples_per_s, o.memory_total, order.get(o.strategy, 0)))
    undominated = [o for o in ranked if not any(dominates(x, o) for x in ranked)]
    best = undominated[0]  # the fastest is dominated only by one as fast with less memory
    tied = [o for o in undominated if in_band(o, best)]
    simplest = min(ranks[o.strategy] for o in tied)
    same = [o for o in tied if ranks[o.strategy] == simplest]
    fastest, roomiest = same[0], max(same, key=lambda o: o.max_micro_batch)
    return roomiest if _roomier(roomiest, fastest) else fastest


def _roomier(a: "Option", b: "Option") -> bool:
    return a.max_micro_batch >= (1 + FRUGAL) * b.max_micro_batch > 0


def _gib(o: "Option") -> str:
    return f"{o.memory_total / GiB:.1f} GiB"


def _dominated_reason(pick_: "Option", feasible: list["Option"]) -> str | None:
    """Name the options in the band the pick was compared with and dropped as dominated, with what
    dominated each (the pick, or another option)."""
    best = max(feasible, key=lambda o: o.samples_per_s)
    dropped = [o for o in feasible if o is not pick_ and in_band(o, best) and any(dominates(x, o) for x in feasible)]
    if not dropped:
        return None
    parts = []
    for o in sorted(dropped, key=lambda o: -o.samples_per_s):
        by = (
            pick_
            if dominates(pick_, o)
            else max((x for x in feasible if dominates(x, o)), key=lambda x: x.samples_per_s)
        )
        parts.append(
            f"{o.strategy} ({o.samples_per_s:.2f} samples/s, {o.memory_total / GiB:.2f} GiB) by {by.strategy} "
            f"({by.samples_per_s:.2f}, {by.memory_total / GiB:.2f} GiB)"
        )
    return "in the band but dominated (another option no larger and clearly faster): " + "; ".join(parts)


def _frugal_rival(pick_: "Option", feasible: list["Option"], ranks: dict[str, int]) -> str | None:
    """A tied option that needs less memory than the pick is not dominated by it: say why it lost
    (it is slower, and memory decides nothing between two options that both fit)."""
    best = max(feasible, key=lambda o: o.samples_per_s)
    rivals = [o for o in feasible if in_band(o, best) and o.memory_total < pick_.memory_total]
    rivals = [o for o in rivals if o is not best and not any(dominates(x, o) for x in feasible)]
    if not rivals:
        return None
    r = min(rivals, key=lambda o: o.memory_total)
    why = (
        "the simpler engine wins in the band"
        if ranks[pick_.strategy] < ranks[r.strategy]
        else f"memory alone decides nothing (its max micro-batch {r.max_micro_batch} vs {pick_.max_micro_batch} is not "
        f"{FRUGAL:.0%} larger)"
    )
    return (
        f"{r.strategy} needs less memory ({_gib(r)} vs {_gib(pick_)}) at {r.samples_per_s:.2f} samples/s "
        f"({r.samples_per_s / pick_.samples_per_s - 1:+.1%}): both fit, and {why}"
    )


def _first_reason(pick_: "Option", feasible: list["Option"], ranks: dict[str, int]) -> str:
    how = (
        f"{pick_.samples_per_s:.2f} samples/s, {_gib(pick_)} per device, at {batch_text(pick_)} ({pick_.bound}-bound, "
        f"exposed communication {pick_.comm_fraction:.0%} of the step)"
    )
    best = max(feasible, key=lambda o: (o.samples_per_s, -o.memory_total))
    if pick_.samples_per_s >= best.samples_per_s:
        return f"{pick_.strategy}: highest predicted throughput of {len(feasible)} feasible options, {how}"
    return (
        f"{pick_.strategy}: {how}; tied with the fastest, {best.strategy} at {best.samples_per_s:.2f} samples/s and "
        f"{_gib(best)} ({best.samples_per_s / pick_.samples_per_s - 1:+.1%}, within the {TIE:.0%} uncertainty band), "
        f"and chosen as {_why_won(pick_, best, ranks)}"
    )


def _why_won(pick_: "Option", best: "Option", ranks: dict[str, int]) -> str:
    """What RANKING_RULE step put the tied pick above the faster best."""
    ps, bs = get_strategy(pick_.strategy), get_strategy(best.strategy)
    if ranks[pick_.strategy] < ranks[best.strategy]:
        return f"the simpler engine ({ps.engine}{', nothing sharded' if not ps.sharded else ''}, not {bs.engine})"
    return (
        f"the option with room to grow the batch (max micro-batch {pick_.max_micro_batch} vs {best.max_micro_batch}, "
        f"at least {FRUGAL:.0%} larger)"
    )


def _batch_lead(sc: "Scenario", pick: "Option", feasible: list["Option"]) -> str | None:
    """Without --global-batch each option runs its own largest micro-batch: say so when the pick
    leads its closest rival while running a larger batch."""
    if sc.training.global_batch is not None:
        return None
    rival = next((o for o in feasible if o is not pick and o.samples_per_s <= pick.samples_per_s), None)
    if rival is None or pick.global_batch <= rival.global_batch:
        return None
    return (
        f"{pick.strategy}'s lead over {rival.strategy} comes partly from a larger batch: {pick.global_batch} vs "
        f"{rival.global_batch} samples per step (each option at its largest micro-batch); pass --global-batch "
        "to compare them at one batch"
    )


def recommend(sc: "Scenario", options: list["Option"]) -> tuple[str | None, list[str], list[str]]:
    feasible = sorted((o for o in options if o.feasible), key=lambda o: -o.samples_per_s)
    infeasible = _grouped_reasons([o for o in options if not o.feasible], len(options))
    blocking = blocking_rules(sc, options)
    warnings = [w for w in _warnings(sc) if not (feasible == [] and w.split(":", 1)[0] in blocking)]
    if not feasible:
        return None, [nothing_viable_advice(sc, options, blocking), *infeasible], warnings
    registry = all_strategies()
    ranks = engine_ranks(registry)
    chosen = pick(feasible, registry)
    reasons = [_first_reason(chosen, feasible, ranks)]
    rivals = (_frugal_rival(chosen, feasible, ranks), _dominated_reason(chosen, feasible))
    reasons += [r for r in rivals if r is not None]
    pick_ = chosen
    if (lead := _batch_lead(sc, pick_, feasible)) is not None:
        reasons.append(lead)
    runner = next((o for o in feasible[feasible.index(pick_) + 1 :]), None)
    if runner is not None:
        reasons.append(
            f"next below it: {runner.strategy}, {runner.samples_per_s:.2f} samples/s "
            f"({runner.samples_per_s / pick_.samples_per_s - 1:+.1%}), {_gib(runner)}, at {batch_text(runner)}"
        )
    best = feasible[0]
    if (overlap := _range_reason(sc, pick_, best if best is not pick_ else runner)) is not None:
        reasons.append(overlap)
    if (scale := _scale_reason(sc, pick_)) is not None:
        reasons.append(scale)
    return pick_.strategy, reasons + infeasible, warnings


def _scale_reason(sc: "Scenario", pick: "Option") -> str | None:
    """When scale terms, not the fit's own error, set how slow the pick may run: say which, by how
    much, and what measures each (estimate/ranges.PredictionRange.to_measure)."""
    r, rng = pick.range, pick.samples_per_s_range
    names = r.to_measure() if r is not None else []
    if not names or rng is None:
        return None
    lay, hows = sc.layout, []
    for name in names:
        if name == LATE:
            hows.append(
                f"the per-rank spread: log a few steps with StepMonitor at {lay.world} ranks "
                "and pass the folder as --rank-jitter (`prism-strategy analyze` checks the same logs for stragglers)"
            )
        elif not any("commbench" in h for h in hows):
            hows.append(
                f"the collectives at {lay.nodes} nodes: {commbench_command(sc, [pick.strategy], pick)} "
                "(emit writes commbench.pbs / commbench.sbatch), or time it end to end there: "
                "bench.pbs / bench.sbatch from `emit --from-plan` (bench --launched)"
            )
    parts = ", ".join(f"{k} x{math.exp(r.terms[k]):.2f}" for k in names)
    return (
        f"{pick.strategy} may run as slow as {rng[0]:.2f} samples/s ({1 - rng[0] / pick.samples_per_s:.0%} below "
        f"the prediction), mostly from {parts} (provenance.range); measure " + "; ".join(hows)
    )


def _grouped_reasons(infeasible: list["Option"], total: int) -> list[str]:
    """One line per distinct reason, naming the options it applies to (all of them: 'every option')."""
    groups: dict[str, list[str]] = {}
    for o in infeasible:
        groups.setdefault(o.why_not or "", []).append(o.strategy)
    return [
        f"{'every option' if len(names) == total and total > 1 else ', '.join(names)}: {why}"
        for why, names in groups.items()
    ]


def _range_reason(sc: "Scenario", pick: "Option", rival: "Option | None") -> str | None:
    """Say when the rival's predicted throughput lies inside the pick's range (the ranking between
    them is not decided by the model), and what to measure to decide it."""
    if rival is None or pick.samples_per_s_range is None:
        return None
    lo, hi = pick.samples_per_s_range
    if not lo <= rival.samples_per_s <= hi:
        return None
    lay = sc.layout
    if lay.multi_node:  # what sets them apart crosses nodes: one node cannot decide it
        beyond = " (beyond the nodes the fit measured)" if lay.nodes > measured_nodes(sc) else ""
        how = (
            f"measure their collectives at this scale{beyond}: "
            f"{commbench_command(sc, [pick.strategy, rival.strategy], pick)} "
            f"(emit writes commbench.pbs / commbench.sbatch for {lay.nodes} nodes), or time both end to end "
            "there: bench.pbs / bench.sbatch from `emit --from-plan` (bench --launched, the plan's top three)"
        )
    else:
        how = f"run both on one node: {bench_command(sc, [pick.strategy, rival.strategy], pick)}"
    return (
        f"{rival.strategy}'s {rival.samples_per_s:.2f} samples/s lies inside {pick.strategy}'s predicted range "
        f"({lo:.2f}-{hi:.2f}, provenance.range): the model cannot rank these two; {how}"
    )


def _warnings(sc: "Scenario") -> list[str]:
    t, lay, out = sc.training, sc.layout, []
    for v in check(RuleFacts(device=sc.platform.device, compile=t.compile, multi_node=lay.multi_node)):
        out.append(f"{v.rule.id}: {v.message}")
    return out
