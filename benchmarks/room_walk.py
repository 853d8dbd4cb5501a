"""How often a scenario's walk through the planner returns to a room it had left (issue 37).

A room is the first package (or module) below prism_strategy: planning, estimate, specs, engines,
strategies, rules... The walk is the sequence of rooms of the calls sys.setprofile sees (call
events of prism_strategy's own functions, consecutive calls in one room counted once); a return
is a step into a room the walk had been in before and left. Measured for one strategy's
evaluation (planning/planner.py evaluate, what plan() does per strategy; planning/search.py
evaluate_searched before the checkpointing search moved into estimate/) and for the whole plan()
of the scenario (qwen3-0.6b on aurora, 10 nodes; the Scenario built beforehand, so only the
planner's walk counts). Three counts: every call's room (specs' and strategies' small accessors
included); planning/'s own calls out of its room, by module (the hallway the issue counts: each
call into a module planning had already called is a return); and the same calls by room (the
rooms planning/ steps into in order, consecutive repeats counted once: a return is a step into a
room it had stepped into before). `--calls` lists the walk.

    PYTHONPATH=src python benchmarks/room_walk.py [--strategy fsdp_full_shard] [--calls]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

PACKAGE = "prism_strategy."


def room_of(module: str | None) -> str | None:
    """The room of a module name: the first name below prism_strategy (None outside it)."""
    if not module or not module.startswith(PACKAGE):
        return None
    return module[len(PACKAGE) :].split(".", 1)[0]


def walk(fn: Callable[[], Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """(room, module.function) of every call fn makes into prism_strategy, in order; and the
    modules planning/ calls into outside itself (the planner's own hallway), in order."""
    calls: list[tuple[str, str]] = []
    hallway: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__")
        room = room_of(module)
        if room is None:
            return
        calls.append((room, f"{module}.{frame.f_code.co_name}"))
        caller = frame.f_back
        if room != "planning" and caller is not None and room_of(caller.f_globals.get("__name__")) == "planning":
            hallway.append(module)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls, hallway


def returns(rooms: list[str]) -> int:
    """Steps into a room the walk had already been in and left."""
    seen: set[str] = set()
    count, last = 0, None
    for r in rooms:
        if r == last:
            continue
        count += r in seen
        seen.add(r)
        last = r
    return count


def scenario_and_planner():
    """(the scenario, its planner walk, one strategy's evaluation) under this checkout's layout."""
    from prism_strategy.planning import planner
    from prism_strategy.specs.parts import model_parts

    try:  # issue 37: the Scenario is built in inputs/, planning.plan takes it whole
        from prism_strategy.flags import scenario_from_flags

        sc = scenario_from_flags("qwen3-0.6b", platform="aurora", nodes=10, ckpt_freq="auto", calibration="auto")
        whole = lambda: planner.plan(sc)  # noqa: E731
    except ImportError:  # the layout before it: planning/scenario.py built it, plan_scenario planned it
        from prism_strategy.planning.scenario import build_scenario
        from prism_strategy.specs.policies import PlanOptions

        sc = build_scenario("qwen3-0.6b", platform="aurora", nodes=10, ckpt_freq="auto")
        whole = lambda: planner.plan_scenario(sc, PlanOptions())  # noqa: E731

    def one(strategy: str):
        from prism_strategy.strategies import get_strategy

        s = get_strategy(strategy)
        parts = model_parts(sc.model, sc.training)
        try:  # before issue 37 moved the checkpointing search into estimate/ckpt_search.py
            from prism_strategy.planning.search import evaluate_searched
        except ImportError:
            return lambda: planner.evaluate(sc, s, parts, search_ckpt=True)
        return lambda: evaluate_searched(sc, s, parts, planner.evaluate)

    return whole, one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", default="fsdp_full_shard")
    ap.add_argument("--calls", action="store_true", help="list the rooms each walk enters, in order")
    args = ap.parse_args()
    whole, one = scenario_and_planner()
    whole()  # warm the caches (presets, fits) so the walk is the planner's, not the loaders'
    for label, fn in ((f"one strategy ({args.strategy})", one(args.strategy)), ("whole plan()", whole)):
        calls, hallway = walk(fn)
        rooms = [r for r, _ in calls]
        entries = Counter(r for i, r in enumerate(rooms) if i == 0 or rooms[i - 1] != r)
        print(f"{label}: {len(calls)} calls, returns to a room left (every call): {returns(rooms)}")
        print("  entries per room: " + ", ".join(f"{r} {n}" for r, n in entries.most_common()))
        out = Counter(hallway)
        print(
            f"  planning/'s own calls out: {len(hallway)} into {len(out)} modules, returns: {len(hallway) - len(out)}"
        )
        print("    " + ", ".join(f"{m[len(PACKAGE) :]} {n}" for m, n in out.most_common()))
        steps = [room_of(m) for m in hallway]
        entered = Counter(r for i, r in enumerate(steps) if i == 0 or steps[i - 1] != r)
        print(
            f"  planning/'s calls out by room: {sum(entered.values())} steps into {len(entered)} rooms, "
            f"returns: {returns(steps)}"
        )
        print("    " + ", ".join(f"{r} {n}" for r, n in entered.most_common()))
        if args.calls:
            last = None
            for r, name in calls:
                if r != last:
                    print(f"    {r:<12} {name}")
                last = r


if __name__ == "__main__":
    main()
