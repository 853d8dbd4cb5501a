"""When nothing fits: what does not fit (model states, activations, the loss buffers) and the
smallest change that fits, computed from the same memory model the plan judged with.

- Nodes needed, per sharded strategy: the fewest nodes whose peak at micro-batch 1 (the engine's
  moments, judged as the plan judges: estimate/entry.py device_peak_at)
  fits the usable memory. More nodes only divide model states, so the peak falls with N: the
  MAX_RANKS bound is tried first (nothing fits there: no node count helps), then doubling and
  bisection (at most ~2 log2(bound) evaluations).
- Checkpointing: the option at `--ckpt-freq 1` (every block), judged the same way.
- `states_never_fit` is the planner's first question: when even the most sharded option's model
  states exceed the usable memory, nothing is timed (a 100,000-layer config answers at once).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prism_strategy.estimate.entry import BatchAt, MemoryAt, device_peak_at, memory_at, model_state_bytes
from prism_strategy.rules import blocking
from prism_strategy.specs.cluster import MAX_RANKS, GiB, Layout
from prism_strategy.specs.parts import Part, model_parts
from prism_strategy.strategies import StrategySpec, all_strategies, get_strategy

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
    from prism_strategy.specs.scenario import Scenario


def _states(parts: tuple[Part, ...], sc: "Scenario", s: StrategySpec, nodes: int) -> float:
    return model_state_bytes(sc.with_layout(Layout(nodes=nodes, ranks_per_node=sc.layout.ranks_per_node)), s, parts)


def _least_ckpt(sc: "Scenario") -> int | None:
    """The checkpointing the advice judges at: every block under --ckpt-freq auto (the least
    memory it can choose), else the one asked for."""
    return 1 if sc.training.ckpt_auto else None


def _peak(parts: tuple[Part, ...], sc: "Scenario", s: StrategySpec, nodes: int, ckpt: int | None = None) -> float:
    """Device bytes at micro-batch 1 (the allocator's reserved at the limit) on `nodes` nodes."""
    ckpt = _least_ckpt(sc) if ckpt is None else ckpt
    t = sc.training if ckpt is None else replace(sc.training, ckpt_freq=ckpt, ckpt_policy="full")
    lay = Layout(nodes=nodes, ranks_per_node=sc.layout.ranks_per_node)
    return device_peak_at(sc.with_training(t).with_layout(lay), s, BatchAt(micro_batch=1), parts=parts)


def max_nodes(sc: "Scenario") -> int:
    return MAX_RANKS // sc.layout.ranks_per_node


def nodes_needed(parts: tuple[Part, ...], sc: "Scenario", s: StrategySpec, ckpt: int | None = None) -> int | None:
    """The fewest nodes (>= the asked count) on which `s` fits at micro-batch 1; None when no node
    count up to the MAX_RANKS bound does. The peak only falls as nodes are added (states are
    divided, nothing else grows), so: the bound first, then doubling and bisection."""
    usable, n0, top = sc.platform.usable_bytes, sc.layout.nodes, max_nodes(sc)

    def fits(n: int) -> bool:
        return _peak(parts, sc, s, n, ckpt) <= usable

    if not fits(top):
        return None
    if fits(n0):
        return n0
    lo, hi = n0, min(2 * n0, top)
    while not fits(hi):
        lo, hi = hi, min(2 * hi, top)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def _what_does_not_fit(parts: tuple[Part, ...], sc: "Scenario", s: StrategySpec) -> str:
    usable = sc.platform.usable_bytes
    states = _states(parts, sc, s, sc.layout.nodes)
    if states > usable:
        return f"model states alone need {states / GiB:.1f} GiB per device > {usable / GiB:.1f} GiB usable"
    peak = _peak(parts, sc, s, sc.layout.nodes)
    return (
        f"model states fit ({states / GiB:.1f} GiB) but activations and buffers at micro-batch 1 take it to "
        f"{peak / GiB:.1f} GiB > {usable / GiB:.1f} GiB usable"
    )


def smallest_changes(sc: "Scenario", parts: tuple[Part, ...], specs: list[StrategySpec]) -> list[str]:
    """Computed changes that make an option fit: nodes needed per strategy (the fewest first),
    and checkpointing every block where the scenario pins a sparser one."""
    out: list[str] = []
    least = min(specs, key=lambda s: _states(parts, sc, s, sc.layout.nodes))
    out.append(f"{least.name} (the least memory): {_what_does_not_fit(parts, sc, least)}")
    needs = {s.name: nodes_needed(parts, sc, s) for s in specs if s.sharded}
    fits = sorted((n, name) for name, n in needs.items() if n is not None)
    if fits:
        by_n: dict[int, list[str]] = {}
        for n, name in fits:
            by_n.setdefault(n, []).append(name)
        each = "; ".join(f"{', '.join(names)} on {n} nodes" for n, names in list(by_n.items())[:3])
        out.append(f"nodes needed at micro-batch 1 (sharded strategies divide the model states): {each}")
    else:
        top = max_nodes(sc)
        s = min((s for s in specs if s.sharded), key=lambda s: _peak(parts, sc, s, top))
        ckpt = " with checkpointing every block" if sc.training.ckpt_auto else ""
        out.append(
            f"no node count up to {top} ({MAX_RANKS} ranks) fits a sharded strategy at micro-batch 1{ckpt}: the "
            f"least ({s.name}) still needs {_peak(parts, sc, s, top) / GiB:.1f} GiB per device there (activations "
            "and what is not sharded over nodes); a shorter --seq-len or a smaller model"
        )
    t = sc.training
    if not t.ckpt_auto and t.ckpt_freq != 1:
        full = sorted((n, s.name) for s in specs if s.sharded and (n := nodes_needed(parts, sc, s, ckpt=1)) is not None)
        if full:
            out.append(f"--ckpt-freq 1 (checkpoint every block): {full[0][1]} fits on {full[0][0]} nodes")
    return out


def states_never_fit(
    sc: "Scenario", parts: tuple[Part, ...], specs: list[StrategySpec], at_batch_1: bool = True
) -> list["Option"] | None:
    """Options judged without timing when none can fit at this layout: when no strategy's model
    states fit, or none fits at micro-batch 1 with the least checkpointing it may use (every block
    under --ckpt-freq auto), each judged from its memory moments alone; None when some might fit
    (the planner then evaluates them all). at_batch_1=False: the model states alone decide
    (`estimate` still traces what the analytic peak calls too large)."""
    usable, least = sc.platform.usable_bytes, _least_ckpt_scenario(sc)
    states = {s.name: model_state_bytes(sc, s, parts) for s in specs}
    never = min(states.values()) > usable
    if not never and not at_batch_1:
        return None
    one = BatchAt(micro_batch=1)
    at = {s.name: memory_at(least, s, one, parts=parts) for s in specs}
    if not never and any(m.device_peak_bytes <= usable for m in at.values()):
        return None
    return [_untimed(least, s, at[s.name], states[s.name], usable) for s in specs]


def _least_ckpt_scenario(sc: "Scenario") -> "Scenario":
    """sc at the checkpointing the advice judges at (_least_ckpt)."""
    ckpt = _least_ckpt(sc)
    return sc if ckpt is None else sc.with_training(replace(sc.training, ckpt_freq=ckpt, ckpt_policy="full"))


def _untimed(sc: "Scenario", s: StrategySpec, at: MemoryAt, states: float, usable: float) -> "Option":
    """The option at micro-batch 1 (`at`, on sc at the least checkpointing), judged from its
    moments: infeasible, judged before timing."""
    from prism_strategy.planning.option import Option

    mem, device = at.memory, at.device_peak_bytes
    top = ", ".join(f"{label} {b / GiB:.1f}" for label, b in mem.largest_items(2))
    states_say = "do not fit" if states > usable else "fit; activations and buffers do not"
    why = (
        f"out of memory: needs {device / GiB:.1f} GiB at micro-batch 1 > {usable / GiB:.1f} GiB usable ({top} GiB; "
        f"model states alone {states / GiB:.1f} GiB {states_say}); judged before timing, so no step time is predicted"
    )
    return Option(strategy=s.name, feasible=False, why_not=why, untimed=at, ckpt_freq=sc.training.ckpt_name)


FLAG_OF_FACT = {"compile": "--compile"}
"""Rule facts a plan option sets from one of its flags: a rule they trip is fixed by dropping it."""


def blocking_rules(sc: "Scenario", options: list["Option"]) -> dict[str, Any]:
    """Rules that make every option not viable, by id (empty when some option escapes them all).
    An option the planner judged carries its blocking rules; one judged before timing is judged here."""
    per_option = []
    for o in options:
        blocked = o.blocked_by if o.blocked_by is not None else blocking(sc, get_strategy(o.strategy))
        per_option.append({v.rule.id: v.rule for v in blocked})
    if not per_option or not all(per_option):
        return {}
    return {k: r for d in per_option for k, r in d.items()}


def nothing_viable_advice(sc: "Scenario", options: list["Option"], blocking: dict[str, Any]) -> str:
    """What to change when no option is feasible: the flag a blocking rule names, else memory advice
    that only suggests what can still shrink."""
    flags = sorted({FLAG_OF_FACT[k] for r in blocking.values() for k in r.when if k in FLAG_OF_FACT})
    if blocking:
        fixes = "; ".join(f"{r.fix} [{r.id}]" for r in blocking.values())
        drop = f"drop {' and '.join(flags)}: " if flags else ""
        return f"no strategy is viable with these settings; {drop}{fixes}"
    t = sc.training
    best = max((o.max_micro_batch for o in options), default=0)
    tries = [f"--micro-batch {best} fits"] if t.micro_batch is not None and 1 <= best < t.micro_batch else []
    changes = smallest_changes(sc, model_parts(sc.model, sc.training), list(all_strategies()))
    return "no strategy fits this scenario: " + "; ".join([*changes, *tries])
