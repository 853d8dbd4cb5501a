"""Step logs -> a verdict: ``hang``, ``incomplete``, ``collapse``, ``straggler``, ``input_skew``
or ``healthy``.

The detectors are the ones `StepMonitor` runs online (`prism_strategy.analysis.detect`, where the
compute-vs-collective-wait method is documented), run here on the whole log. A hang comes from
the watchdog's ``hang_report.json`` (or a recorded hang event). A run whose `StepMonitor` log
ends without a close record, and without a hang, is ``incomplete``: killed (OOM killer, SIGKILL,
a node lost, the scheduler's walltime) or still running. Precedence when several fire:
hang > incomplete > collapse > straggler > input_skew; all events are listed.

Beside a collapse, the forensic verdict (`prism_strategy.analysis.forensics`) of what grew, from
the records StepMonitor's capture wrote (a healthy baseline window and the collapse window): the
table of each quantity before vs after, the classification (collective, allocator, host,
unexplained) and the experiment that would settle it. A run killed mid-capture is analysed from
the steps it wrote.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np

from prism_strategy.analysis.detect import DetectConfig, Series, detect_all, summarize
from prism_strategy.analysis.forensics import analyze_forensics
from prism_strategy.diagnose.logs import RunLog, load_run
from prism_strategy.diagnose.window_verdict import healthy_message, window_events
from prism_strategy.readers.steps import Event

__all__ = ["Verdict", "Event", "RankSummary", "analyze", "analyze_run", "load_run"]

VerdictKind = Literal["collapse", "slowdown", "straggler", "hang", "incomplete", "input_skew", "healthy"]
PRECEDENCE: tuple[str, ...] = ("hang", "incomplete", "collapse", "slowdown", "straggler", "input_skew")


@dataclass(frozen=True, slots=True)
class RankSummary:
    """Medians over a rank's steps (after the warm-up skip), in seconds."""

    rank: int
    steps: int
    step_s: float
    data: float
    forward: float
    backward: float
    optimizer: float
    tokens: float

    def to_dict(self) -> dict[str, Any]:
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else round(v, 6) if isinstance(v, float) else v)
            for k, v in ((f, getattr(self, f)) for f in self.__slots__)
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: VerdictKind
    events: tuple[Event, ...]
    ranks: dict[int, RankSummary]
    evidence: dict[str, Any]
    sources: tuple[str, ...] = ()
    series: Series | None = field(default=None, repr=False, compare=False)
    """The per-rank arrays the verdict was computed from (for plots)."""
    warmup_skip: int = 0
    """Steps left out of the per-rank medians (the first ones of the series)."""
    skipped: tuple[str, ...] = ()
    """What the readers left out (an earlier run in the same file, a cut last line, a stale hang report)."""
    forensics: dict[str, Any] | None = None
    """What grew in a collapse (`analysis.forensics`), where the capture ran."""

    @property
    def healthy(self) -> bool:
        return self.verdict == "healthy"

    @property
    def message(self) -> str:
        return str(self.evidence.get("message", ""))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "events": [e.to_dict() for e in self.events],
            "ranks": {str(r): s.to_dict() for r, s in self.ranks.items()},
            "evidence": self.evidence,
            "sources": list(self.sources),
            "skipped": list(self.skipped),
            **({"forensics": self.forensics} if self.forensics is not None else {}),
        }


def _hang_event(rep: dict[str, Any]) -> Event:
    behind = rep.get("ranks_not_reached") or {}
    suspects = tuple(sorted(int(r) for r in behind)) or tuple(rep.get("ranks_reached") or ())
    where = ", ".join(f"rank {r} at {v.get('phase')!r} of step {v.get('step')}" for r, v in behind.items())
    stacks = Path(rep.get("_path", "hang_report.json")).parent / "stacks"
    msg = (
        f"hang: no progress for {rep.get('timeout_s')}s; stuck in phase {rep.get('phase')!r} of step "
        f"{rep.get('step')}, reached by ranks {rep.get('ranks_reached')}"
        + (f"; not reached by {where}" if where else "")
        + f"; stacks in {stacks}/"
    )
    keep = (
        "phase",
        "step",
        "ranks_reached",
        "ranks_not_reached",
        "ranks_unknown",
        "timeout_s",
        "stacks",
        "flight_recorder",
        "exit_code",
        "detected_by_rank",
    )
    return Event("hang", int(rep.get("step", -1)), suspects, {k: rep.get(k) for k in keep}, msg, "hang_report")


def _rank_summaries(s: Series, skip: int) -> dict[int, RankSummary]:
    t = s.tail(skip) if s.steps.size > skip else s
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = {
            f: np.nanmedian(getattr(t, f), axis=1)
            for f in ("step_s", "data", "forward", "backward", "optimizer", "tokens")
        }
    n = np.isfinite(t.step_s).sum(axis=1)
    return {
        r: RankSummary(
            r, int(n[k]), *(float(med[f][k]) for f in ("step_s", "data", "forward", "backward", "optimizer", "tokens"))
        )
        for k, r in enumerate(s.ranks)
    }


def _recorded_extra(run: RunLog, found: list[Event]) -> list[Event]:
    """Recorded events the offline pass cannot see (hangs), once per kind."""
    kinds = {e.kind for e in found}
    extra = [_hang_event(rep) for rep in run.hang_reports[:1]]
    kinds |= {e.kind for e in extra}
    for ev in run.events:
        if ev.kind == "hang" and ev.kind not in kinds:
            extra.append(ev)
            kinds.add(ev.kind)
    return extra


def _incomplete_event(run: RunLog) -> Event | None:
    """Ranks whose StepMonitor log has a meta record but no close record after it."""
    open_ranks = sorted(set(run.meta) - set(run.closed))
    if not open_ranks:
        return None
    last: dict[int, int] = {}
    for rec in run.records:
        last[rec.rank] = max(last.get(rec.rank, -1), rec.step)
    last_step = {str(r): last.get(r) for r in open_ranks}
    where = ", ".join(
        f"rank {r} after step {last[r]}" if r in last else f"rank {r} before its first step" for r in open_ranks
    )
    msg = (
        f"incomplete: the log of {len(open_ranks)} of {len(run.meta)} ranks ends without a close record "
        f"and no hang was reported: {where}. The run was killed (OOM killer, SIGKILL, a lost node, "
        "the walltime) or is still running; look at the launcher's output and the scheduler's log"
    )
    step = min((v for v in last_step.values() if v is not None), default=-1)
    ev = {"last_step": last_step, "closed": {str(r): n for r, n in sorted(run.closed.items())}}
    return Event("incomplete", step, tuple(open_ranks), ev, msg, "log")


def _oversubscribed(run: RunLog) -> list[dict[str, Any]]:
    """Hosts that ran more ranks than they have CPUs (from the meta records)."""
    hosts: dict[str, list[int]] = {}
    cpus: dict[str, int] = {}
    for r, m in run.meta.items():
        h = str(m.get("host", "?"))
        hosts.setdefault(h, []).append(r)
        if isinstance(m.get("cpus"), int):
            cpus[h] = m["cpus"]
    return [
        {"host": h, "ranks": len(rs), "cpus": cpus[h]}
        for h, rs in sorted(hosts.items())
        if h in cpus and len(rs) > cpus[h]
    ]


def _with_host_facts(ev: Event, run: RunLog) -> Event:
    over = _oversubscribed(run)
    if ev.kind != "straggler" or not over:
        return ev
    note = "; ".join(f"host {o['host']} ran {o['ranks']} ranks on {o['cpus']} CPUs" for o in over)
    msg = ev.message + f". {note}: oversubscribed, and a rank it slows is a real straggler"
    return Event(ev.kind, ev.step, ev.ranks, {**ev.evidence, "oversubscribed": over}, msg, ev.source)


def _healthy_message(series: Series | None, skip: int) -> str:
    n = series.steps.size if series is not None else 0
    used = max(0, n - skip) if n > skip else n
    if n == 0:
        return "healthy: no step records, and no hang"
    first, last = (int(series.steps[skip]) if n > skip else int(series.steps[0])), int(series.steps[-1])
    # a log that writes a line every k steps gives records, not steps: say which was counted
    every = last - first + 1 != used
    unit = f"logged records (one every {(last - first) // max(1, used - 1)} steps, " if every else "steps ("
    warm = f"; the first {skip} {'records ' if every else ''}are warm-up)" if n > skip else ")"
    return f"healthy: no collapse, straggler, hang or input skew in {used} {unit}steps {first}-{last}" + warm


def analyze_run(run: RunLog, config: DetectConfig | None = None) -> Verdict:
    cfg = config or DetectConfig()
    series = Series.from_records(run.records) if run.records else None
    found = detect_all(series, cfg) if series is not None else window_events(run.windows, cfg)
    extra = _recorded_extra(run, found) + [e for e in run.events if e.kind == "incomplete" and e.source == "log"]
    if not any(e.kind == "hang" for e in extra):
        extra += [e for e in (_incomplete_event(run),) if e is not None]
    events = [_with_host_facts(e, run) for e in extra + found]
    events.sort(key=lambda e: PRECEDENCE.index(e.kind))
    ranks = _rank_summaries(series, cfg.warmup_skip) if series is not None else {}
    base = summarize(series.tail(min(cfg.warmup_skip, max(0, series.steps.size - 1)))) if series is not None else {}
    if events:
        top = events[0]
        evidence = {"message": top.message, "step": top.step, "ranks": list(top.ranks), **top.evidence}
        kind: VerdictKind = top.kind
    else:
        kind = "healthy"
        healthy = _healthy_message(series, cfg.warmup_skip) if series is not None or not run.windows else None
        evidence = {"message": healthy or healthy_message(run.windows), **base}
    evidence["run"] = base
    forensics = _forensics(run, events)
    return Verdict(
        kind, tuple(events), ranks, evidence, tuple(run.sources), series, cfg.warmup_skip, tuple(run.skipped), forensics
    )


def _forensics(run: RunLog, events: list[Event]) -> dict[str, Any] | None:
    """The capture's verdict when a collapse was found (or captured online); else None."""
    collapsed = any(e.kind == "collapse" for e in events) or any(r.get("window") == "collapse" for r in run.forensics)
    if not collapsed:
        return None
    found = analyze_forensics(run.forensics, run.meta)
    if found is not None and found.get("kind") is None:
        found["message"] = (
            "forensics: the run ended before the capture's collapse window (it opens at the first summary "
            "step after the signature is seen, for 5 steps); only the healthy baseline was captured"
        )
    if found is None:
        return {
            "kind": None,
            "message": "forensics: nothing was captured (a StepMonitor older than the capture, or forensics=None)",
        }
    return found


def analyze(
    paths: Iterable[str | Path] | str | Path, config: DetectConfig | None = None, fmt: str | None = None
) -> Verdict:
    """Read a run directory or log files (`fmt`: only that format) and decide (SpecError on bad input)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    return analyze_run(load_run(paths, fmt), config)
