"""Explain a plan: per-option notes, the ranking, and the reasons that decided it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from prism_strategy.engines import engine_of
from prism_strategy.estimate.memory import estimate_memory, gathered_model_bytes, moments
from prism_strategy.estimate.memory_runtime import device_peak
from prism_strategy.estimate.ranges import LATE, max_measured_nodes
from prism_strategy.planning.followup import bench_command, commbench_command
from prism_strategy.rules import RuleFacts, check
from prism_strategy.specs.cluster import GiB
from prism_strategy.specs.parts import Part
from prism_strategy.strategies import all_strategies, get_strategy

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
    from prism_strategy.planning.scenario import Scenario

TIE = 0.10
"""Options within 10% of the best predicted throughput are tied: an uncalibrated prediction is not
more accurate than that. Among tied options the simplest engine present wins (the registry's order:
DDP, torch FSDP2, DeepSpeed); among its options the fastest, unless another needs 5% less memory per
device (then the most frugal). The first reason says which happened: the pick was fastest, or it
sits in the band of the named faster one and why it won."""


def _root_wrap_note(sc: "Scenario", parts: tuple[Part, ...], o: "Option") -> str | None:
    s = get_strategy(o.strategy)
    if not engine_of(s).unit_wrapped:
        return None
    root = estimate_memory(parts, sc.training, sc.platform, sc.layout, s, o.micro_batch, wrap="root")
    extra = (root.total - o.memory.total) / GiB
    t, p = sc.training, sc.platform  # judged as options are: reserved at the limit (estimate/memory_runtime.py)
    need = device_peak(
        moments(parts, t, p, sc.layout, s, wrap="root", accumulating=o.grad_accum > 1), o.micro_batch, p, t
    )
    fits = "it would fit" if need <= p.usable_bytes else "it does not fit"
    return (
        f"this option wraps each transformer block; wrapping only the root (one flat unit) instead would add "
        f"{extra:.1f} GiB ({root.total / GiB:.1f} GiB at micro-batch {o.micro_batch}: {fits})"
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


def _notes(sc: "Scenario", parts: tuple[Part, ...], o: "Option") -> list[str]:
    s, t, notes = get_strategy(o.strategy), sc.training, []
    if s.param_shard != "none" and not s.reshard_after_forward:
        gathered = gathered_model_bytes(parts, t)
        notes.append(
            f"keeps the whole model gathered ({gathered / GiB:.1f} GiB) on each of "
            f"{sc.layout.ranks_per_node} ranks per node from forward to backward"
        )
    if (n := _root_wrap_note(sc, parts, o)) is not None:
        notes.append(n)
    if (n := _loss_note(o)) is not None:
        notes.append(n)
    if engine_of(s).declares_static_graph and sc.model.mode != "e2e":
        notes.append(
            f"only the {sc.model.trainable_params / 1e6:.1f}M trainable params are all-reduced; "
            "static_graph=True when every batch uses the same modalities"
        )
    if (n := engine_of(s).precision_note(t.precision)) is not None:
        notes.append(n)
    if o.comm is not None and o.comm_s > 0:
        links = sorted({c.link for c in o.comm.collectives if c.seconds_per_step > 0})
        notes.append(
            f"{o.bound}-bound: communication {o.comm_s:.3f} s ({', '.join(links) or 'none'}) vs compute "
            f"{o.compute_s:.3f} s per step; {o.exposed_comm_s:.3f} s exposed"
        )
    return notes


def annotate(sc: "Scenario", parts: tuple[Part, ...], options: list["Option"]) -> None:
    for o in options:
        o.notes.extend(_notes(sc, parts, o))


FRUGAL = 0.05
"""A pick is called more memory-frugal than the faster option only when it leaves 5% more room."""


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


def _engine_rank(name: str) -> int:
    """Simplicity of a strategy's engine: its first position in the registry (DDP's engine, then
    torch's FSDP2, then DeepSpeed, as the catalogue lists them)."""
    specs = all_strategies()
    engine = get_strategy(name).engine
    return next(i for i, s in enumerate(specs) if s.engine == engine)


def _frugal(a: "Option", b: "Option") -> bool:
    """a leaves clearly more room than b: a FRUGAL larger max micro-batch, or at the same max,
    FRUGAL less memory per device."""
    if a.max_micro_batch != b.max_micro_batch:
        return a.max_micro_batch >= (1 + FRUGAL) * b.max_micro_batch
    return a.memory.total < (1 - FRUGAL) * b.memory.total


def pick_in_band(tied: list["Option"]) -> "Option":
    """The uncertainty band's winner: the options of the simplest engine in the band; among them the
    fastest, unless another needs at least FRUGAL less memory per device (then the most frugal).
    Sorted fastest first."""
    simplest = min(_engine_rank(o.strategy) for o in tied)
    same = [o for o in tied if _engine_rank(o.strategy) == simplest]
    fastest, frugal = same[0], max(same, key=lambda o: (o.max_micro_batch, -o.memory.total))
    return frugal if _frugal(frugal, fastest) else fastest


def _tie_break(pick: "Option", best: "Option") -> str:
    """Why pick won the band over the faster best, in words that are true of the two."""
    if _engine_rank(pick.strategy) < _engine_rank(best.strategy):
        ps, bs = get_strategy(pick.strategy), get_strategy(best.strategy)
        return f"the simpler engine ({ps.engine}{', nothing sharded' if not ps.sharded else ''}, not {bs.engine})"
    if pick.max_micro_batch != best.max_micro_batch:
        return f"the more memory-frugal option (max micro-batch {pick.max_micro_batch} vs {best.max_micro_batch})"
    return (
        f"the more memory-frugal option ({pick.memory.total / GiB:.1f} vs {best.memory.total / GiB:.1f} GiB per device)"
    )


def _first_reason(pick: "Option", best: "Option", feasible: list["Option"]) -> str:
    how = (
        f"{pick.samples_per_s:.2f} samples/s at {batch_text(pick)} ({pick.bound}-bound, exposed communication "
        f"{pick.comm_fraction:.0%} of the step)"
    )
    if pick is best:
        return f"{pick.strategy}: highest predicted throughput of {len(feasible)} feasible options, {how}"
    faster = sum(o.samples_per_s > pick.samples_per_s for o in feasible)
    others = f"; {faster} options in the band are faster" if faster > 1 else ""
    return (
        f"{pick.strategy}: {how}; within the {TIE:.0%} uncertainty band of the fastest, {best.strategy} at "
        f"{best.samples_per_s:.2f} samples/s ({best.samples_per_s / pick.samples_per_s - 1:+.0%}{others}), "
        f"and chosen as {_tie_break(pick, best)}"
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
    blocking = _blocking_rules(sc, options)
    warnings = [w for w in _warnings(sc) if not (feasible == [] and w.split(":", 1)[0] in blocking)]
    if not feasible:
        return None, [_nothing_viable_advice(sc, options, blocking), *infeasible], warnings
    best = feasible[0]
    tied = [o for o in feasible if o.samples_per_s >= best.samples_per_s * (1 - TIE)]
    pick = pick_in_band(tied)
    reasons = [_first_reason(pick, best, feasible)]
    if (lead := _batch_lead(sc, pick, feasible)) is not None:
        reasons.append(lead)
    runner = next((o for o in feasible[feasible.index(pick) + 1 :]), None)
    if runner is not None:
        reasons.append(
            f"next below it: {runner.strategy}, {runner.samples_per_s:.2f} samples/s "
            f"({runner.samples_per_s / pick.samples_per_s - 1:+.0%}) at {batch_text(runner)}"
        )
    if (overlap := _range_reason(sc, pick, best if best is not pick else runner)) is not None:
        reasons.append(overlap)
    if (scale := _scale_reason(sc, pick)) is not None:
        reasons.append(scale)
    return pick.strategy, reasons + infeasible, warnings


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
                "(emit writes commbench.pbs / commbench.sbatch)"
            )
    parts = ", ".join(f"{k} x{math.exp(r.terms[k]):.2f}" for k in names)
    return (
        f"{pick.strategy} may run as slow as {rng[0]:.2f} samples/s ({1 - rng[0] / pick.samples_per_s:.0%} below "
        f"the prediction), mostly from {parts} (provenance.range); measure " + "; ".join(hows)
    )


FLAG_OF_FACT = {"compile": "--compile"}
"""Rule facts a plan option sets from one of its flags: a rule they trip is fixed by dropping it."""


def _blocking_rules(sc: "Scenario", options: list["Option"]) -> dict[str, Any]:
    """Rules that make every option not viable, by id (empty when some option escapes them all)."""
    per_option = []
    for o in options:
        s = get_strategy(o.strategy)
        facts = RuleFacts(
            device=sc.platform.device,
            backend=sc.platform.backend,
            compile=sc.training.compile,
            multi_node=sc.layout.multi_node,
            **engine_of(s).facts(s),
        )
        per_option.append({v.rule.id: v.rule for v in check(facts) if v.rule.blocks})
    if not per_option or not all(per_option):
        return {}
    return {k: r for d in per_option for k, r in d.items()}


def _nothing_viable_advice(sc: "Scenario", options: list["Option"], blocking: dict[str, Any]) -> str:
    """What to change when no option is feasible: the flag a blocking rule names, else memory advice
    that only suggests what can still shrink."""
    flags = sorted({FLAG_OF_FACT[k] for r in blocking.values() for k in r.when if k in FLAG_OF_FACT})
    if blocking:
        fixes = "; ".join(f"{r.fix} [{r.id}]" for r in blocking.values())
        drop = f"drop {' and '.join(flags)}: " if flags else ""
        return f"no strategy is viable with these settings; {drop}{fixes}"
    t, tries = sc.training, []
    if not t.ckpt_auto:
        tries.append("--ckpt-freq auto")
    best = max((o.max_micro_batch for o in options), default=0)
    if t.micro_batch is not None and 1 <= best < t.micro_batch:  # at micro-batch 1 nothing smaller exists
        tries.append(f"--micro-batch {best}")
    tries += ["a shorter --seq-len", "more nodes (sharded strategies divide the model states)"]
    return f"no strategy fits this scenario; try {', '.join(tries)}"


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
        beyond = " (beyond the nodes the fit measured)" if lay.nodes > max_measured_nodes(sc.platform) else ""
        how = (
            f"measure their collectives at this scale{beyond}: "
            f"{commbench_command(sc, [pick.strategy, rival.strategy], pick)} "
            f"(emit writes commbench.pbs / commbench.sbatch for {lay.nodes} nodes)"
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
