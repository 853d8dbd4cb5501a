"""Exports a later `module load` resets, with the severity what is known allows: an ERROR for a
variable the module is known to set (data/modules/*.toml, or --module-show output), a WARNING
naming the uncertainty for a variable it may set, nothing when `module show` says it does not.

ALCF's style (load once in the job script, export, let mpiexec pass the environment on) and
PRISM's (each rank loads, then exports again) both end with the exports: no finding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.diagnose.launch_options import Event, is_module_load
from prism_strategy.diagnose.live_checks import load_known_bad
from prism_strategy.diagnose.modules import ModuleFacts, facts_for, loaded_names
from prism_strategy.diagnose.shell_eval import MPI_LAUNCHERS


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadKnowledge:
    """What the doctor knows one `module ...` line sets."""

    sets: frozenset[str]
    complete: bool
    """Every variable it sets is known (each module it loads came with module show output)."""
    sources: tuple[str, ...]
    unknown: tuple[str, ...]
    """Modules it loads that no data file or module show output describes."""

    def describe(self) -> str:
        known = ", ".join(sorted(self.sets)) or "no variable"
        where = "; ".join(self.sources) or "no source"
        gap = f"; nothing is known about {', '.join(self.unknown)}" if self.unknown else ""
        return f"it is known to set {known} ({where}){gap}"


def knowledge(load: Event, shown: tuple[ModuleFacts, ...]) -> LoadKnowledge:
    sets: set[str] = set()
    sources, unknown, complete = [], [], True
    names = loaded_names(load.args)
    if not names:  # module purge / unload: what it resets depends on what was loaded
        return LoadKnowledge(sets=frozenset(), complete=False, sources=(), unknown=(f"module {' '.join(load.args)}",))
    for name in names:
        facts = facts_for(name, shown)
        if facts is None:
            unknown.append(name)
            complete = False
            continue
        sets |= set(facts.sets)
        sources.append(facts.source)
        complete = complete and facts.complete
    return LoadKnowledge(
        sets=frozenset(sets), complete=complete, sources=tuple(dict.fromkeys(sources)), unknown=tuple(unknown)
    )


_SHOW_FIX = (
    "make this exact with --module-show live on an Aurora login node, or with saved `module show <module>` "
    "output as --module-show FILE"
)


def check_module_order(
    tl: list[Event], launch: Event | None, per_rank: list[Event] | None, shown: tuple[ModuleFacts, ...], ctx: Context
) -> list[Finding]:
    """Every tracked export followed by a load that (may) reset it and not exported again."""
    tracked = load_known_bad().is_tracked
    loads = [i for i, e in enumerate(tl) if is_module_load(e)]
    if not loads:
        return []
    last_export: dict[str, int] = {}
    for i, e in enumerate(tl):
        if e.kind == "export" and tracked(e.name):
            last_export[e.name] = i
    known: list[tuple[Event, Event]] = []
    maybe: dict[int, list[str]] = {}
    for name, i in last_export.items():
        after = [k for k in loads if k > i]
        facts = [(k, knowledge(tl[k], shown)) for k in after]
        hit = next((k for k, f in facts if name in f.sets), None)
        if hit is not None:
            known.append((tl[i], tl[hit]))
        elif any(not f.complete for _, f in facts):
            maybe.setdefault(next(k for k, f in facts if not f.complete), []).append(name)
    if not known and not maybe:
        return []
    all_lost = bool(last_export) and all(max(loads) > i for i in last_export.values())
    if all_lost and launch is not None and launch.name in MPI_LAUNCHERS and per_rank is not None:
        return _all_lost(tl, loads, known, maybe, launch, per_rank, shown, ctx)
    out = []
    for export, load in known:
        out += check_observed(
            {"exported_before_module_load": True},
            ctx,
            file=export.file,
            line=export.line,
            detail=f"{export.name} is exported before `module {' '.join(load.args)}` "
            f"({load.file}:{load.line}), which sets it, and not again after it",
        )
    for k, names in maybe.items():
        load = tl[k]
        out += _uncertain(
            {"exported_before_module_load": True},
            ctx,
            load.file,
            load.line,
            f"{', '.join(sorted(names))} exported before `module {' '.join(load.args)}` and not "
            f"again after it: the doctor does not know whether that module resets "
            f"{'them' if len(names) > 1 else 'it'}; {knowledge(load, shown).describe()}",
        )
    return out


def _all_lost(
    tl: list[Event],
    loads: list[int],
    known: list[tuple[Event, Event]],
    maybe: dict[int, list[str]],
    launch: Event,
    per_rank: list[Event],
    shown: tuple[ModuleFacts, ...],
    ctx: Context,
) -> list[Finding]:
    """Every export comes before the last load: one finding for the launch, not one per variable."""
    load = tl[max(loads)]
    in_rank = max(loads) >= len(tl) - len(per_rank)
    where = f"{load.file}:{load.line}"
    head = (
        f"each rank runs `module {' '.join(load.args)}` ({where}) after the last CCL/FI export"
        if in_rank
        else f"the CCL/FI exports come before `module {' '.join(load.args)}` ({where}) and none after it"
    )
    if known:
        names = ", ".join(sorted({e.name for e, _ in known}))
        return check_observed(
            {"per_rank_exports": False},
            ctx,
            file=launch.file,
            line=launch.line,
            detail=f"{head}; it is known to reset {names}",
        )
    names = ", ".join(sorted(n for ns in maybe.values() for n in ns))
    return _uncertain(
        {"per_rank_exports": False},
        ctx,
        launch.file,
        launch.line,
        f"{head}: the doctor does not know whether it resets {names}; {knowledge(load, shown).describe()}",
    )


UNCERTAIN_REASON = (
    "a module load can reset CCL/FI variables exported before it; if this one does, the ranks run "
    "with the module's values instead"
)


def _uncertain(observed: dict[str, bool], ctx: Context, file: str, line: int, detail: str) -> list[Finding]:
    """What the rules say if the load does reset the exports, as a warning in words that say the
    doctor does not know whether it does (nothing where the rules do not apply, e.g. not XPU)."""
    return [
        replace(f, severity="warning", message=f"{detail}: {UNCERTAIN_REASON}", fix=f"{f.fix}; or {_SHOW_FIX}")
        for f in check_observed(observed, ctx, file=file, line=line, detail=detail)
    ]
