"""Render an `analyze` verdict (rich, 100 columns): the headline, the evidence as sentences, the
other events, a before/after table for a collapse and a per-rank table in one stated unit."""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any

from rich.console import Console
from rich.table import Table

from prism_strategy.analysis.detect import fmt_s
from prism_strategy.diagnose.analyze import Verdict
from prism_strategy.readers.steps import Event

STYLE = {
    "healthy": "bold green",
    "input_skew": "bold yellow",
    "straggler": "bold red",
    "collapse": "bold red",
    "slowdown": "bold red",
    "hang": "bold red",
    "incomplete": "bold red",
}
MAX_RANK_ROWS = 16
WIDTH = 100


def verdict_json(v: Verdict) -> str:
    return json.dumps(v.to_dict(), indent=2, default=str)


def _plus(x: Any) -> str:
    return "-" if not isinstance(x, (int, float)) or not math.isfinite(x) else ("+" if x >= 0 else "-") + fmt_s(abs(x))


def rank_ranges(ranks: Any) -> str:
    """0,1,2,3,7 -> '0-3, 7' (a 256-rank event stays one line)."""
    rs = sorted(int(r) for r in ranks)
    out: list[str] = []
    for r in rs:
        if out and out[-1][1] == r - 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out) or "-"


# -- evidence as sentences ---------------------------------------------------------------------
def _collapse_lines(ev: dict[str, Any]) -> list[str]:
    b0, b1 = ev.get("baseline_steps", ["?", "?"])
    return [
        f"backward {fmt_s(ev.get('backward_baseline_s'))} -> {fmt_s(ev.get('backward_s'))} "
        f"({ev.get('backward_factor')}x) on every rank from step {ev.get('from_step')} to "
        f"{ev.get('to_step')} ({ev.get('hot_steps')} steps at >= {ev.get('threshold')}x its baseline)",
        f"forward {fmt_s(ev.get('forward_baseline_s'))} -> {fmt_s(ev.get('forward_s'))} "
        f"(at most {ev.get('forward_factor')}x on any rank): compute did not change",
        f"step {fmt_s(ev.get('step_baseline_s'))} -> {fmt_s(ev.get('step_s'))} "
        f"({ev.get('step_time_factor')}x); baseline: steps {b0}-{b1}",
    ]


def _cause_line(r: str, c: dict[str, Any]) -> str:
    cause = c.get("cause")
    if cause == "data_loader":
        return (
            f"cause: data loader: rank {r}'s data phase takes {_plus(c.get('extra_data_s'))} per step "
            f"over the others' ({_plus(c.get('extra_wall_s'))} in all): its input pipeline is slow"
        )
    if cause == "waiting":
        return (
            f"cause: waiting: rank {r} spends {fmt_s(c.get('extra_wall_s'))} more wall time per step "
            f"but {fmt_s(c.get('extra_cpu_s'))} more CPU time (the others' CPU time stretches "
            f"{c.get('others_wall_per_cpu')}x into wall time): it waits - on storage, a slower device "
            "the host waits on, a core (CPU starvation), a sleep - rather than computes"
        )
    parts = f"forward {_plus(c.get('extra_forward_s'))}, optimizer {_plus(c.get('extra_optimizer_s'))}"
    if c.get("cpu_time") == "recorded":
        return (
            f"cause: compute: rank {r}'s CPU time is {c.get('cpu_ratio')}x the others' "
            f"({_plus(c.get('extra_cpu_s'))}; its wall time {_plus(c.get('extra_wall_s'))}, {parts})"
        )
    return (
        f"cause: compute, by wall time ({parts}); no CPU time was recorded (accelerator or "
        "external log), so waiting cannot be told apart"
    )


def _straggler_lines(ev: dict[str, Any]) -> list[str]:
    wall, wait = ev.get("local_wall_s", {}), ev.get("collective_wait_s", {})
    ranks = [str(r) for r in ev.get("ranks", [])]
    others = sorted(w for r, w in wait.items() if r not in ranks and isinstance(w, (int, float)))
    lines = []
    for r in ranks:
        share = (ev.get("over_ratio_share") or {}).get(r)
        lines.append(
            f"rank {r}: data + forward + optimizer take {fmt_s(wall.get(r))} per step, the other "
            f"ranks {fmt_s(ev.get('others_local_wall_s'))} ({ev.get('local_ratio', {}).get(r)}x; over "
            f"{ev.get('threshold')}x in {round(100 * share) if share is not None else '?'}% of "
            f"{ev.get('n_steps')} steps)"
        )
        lines.append(
            f"rank {r} waits {fmt_s(wait.get(r))} in backward, the others "
            f"{fmt_s(others[len(others) // 2] if others else None)}: they wait for it "
            "in the gradient collective"
        )
        lines.append(_cause_line(r, (ev.get("causes") or {}).get(r, {})))
    return lines


def _hang_lines(ev: dict[str, Any]) -> list[str]:
    behind = ev.get("ranks_not_reached") or {}
    lines = [
        f"stuck in phase {ev.get('phase')!r} of step {ev.get('step')} for over {ev.get('timeout_s')} s; "
        f"reached by ranks {rank_ranges(ev.get('ranks_reached') or [])}"
    ]
    for r, where in behind.items():
        if isinstance(where, dict):
            lines.append(f"rank {r} never got there: last seen in {where.get('phase')!r} of step {where.get('step')}")
    return lines


def _skew_lines(ev: dict[str, Any]) -> list[str]:
    return [
        f"compute follows the batch's tokens: Spearman r = {ev.get('spearman_compute_vs_tokens')} over "
        f"{ev.get('points')} (rank, step) points",
        f"{ev.get('tokens_min')}-{ev.get('tokens_max')} tokens -> {fmt_s(ev.get('compute_min_s'))}-"
        f"{fmt_s(ev.get('compute_max_s'))}; {fmt_s((ev.get('s_per_1k_tokens') or 0) / 1000)} per 1k tokens "
        "more",
    ]


def _incomplete_lines(ev: dict[str, Any]) -> list[str]:
    last = ev.get("last_step") or {}
    closed = ev.get("closed") or {}
    lines = [
        f"rank {r}: " + (f"last step {s}" if s is not None else "no step") + " recorded, no close record"
        for r, s in list(last.items())[:MAX_RANK_ROWS]
    ]
    if len(last) > MAX_RANK_ROWS:
        lines.append(f"... and {len(last) - MAX_RANK_ROWS} more ranks")
    if closed:
        lines.append(f"ranks {rank_ranges(closed)} closed their logs normally")
    return lines


SENTENCES = {
    "collapse": _collapse_lines,
    "straggler": _straggler_lines,
    "hang": _hang_lines,
    "input_skew": _skew_lines,
    "incomplete": _incomplete_lines,
}


def evidence_lines(e: Event) -> list[str]:
    """The numbers behind an event, as sentences a reader takes in without the JSON."""
    fn = SENTENCES.get(e.kind)
    return fn(e.evidence) if fn else []


# -- tables ------------------------------------------------------------------------------------
def _events_table(v: Verdict) -> Table:
    t = Table(title="all events", width=WIDTH)
    t.add_column("event", no_wrap=True)
    t.add_column("from step", justify="right")
    t.add_column("ranks")
    t.add_column("what", overflow="fold", ratio=1)
    for e in v.events:
        what = e.message.split(": ", 1)[-1] if e.message.startswith(e.kind.replace("_", " ")) else e.message
        t.add_row(e.kind, str(e.step) if e.step >= 0 else "-", rank_ranges(e.ranks), what)
    return t


def _collapse_table(e: Event) -> Table:
    t = Table(
        title=f"collapse per rank: baseline steps {'-'.join(map(str, e.evidence.get('baseline_steps', [])))} "
        f"-> steps {e.evidence.get('from_step')}-{e.evidence.get('to_step')}"
    )
    for col in ("rank", "backward before", "after", "x", "forward before", "after", "x"):
        t.add_column(col, justify="right")
    per = e.evidence.get("per_rank") or {}
    for r in list(per)[:MAX_RANK_ROWS]:
        p = per[r]
        t.add_row(
            r,
            fmt_s(p.get("backward_baseline_s")),
            fmt_s(p.get("backward_s")),
            str(p.get("backward_ratio")),
            fmt_s(p.get("forward_baseline_s")),
            fmt_s(p.get("forward_s")),
            str(p.get("forward_ratio")),
        )
    return t


def _fmt_q(x: Any, unit: str) -> str:
    if not isinstance(x, (int, float)):
        return "-"
    if unit == "s":
        return fmt_s(x)
    return f"{x / 2**30:.2f} GiB" if unit == "bytes" else f"{x:,.0f}"


def _forensic_table(fx: dict[str, Any]) -> Table:
    """Each quantity, median over ranks and captured steps, before vs after; where it grew."""
    wins = fx.get("windows") or {}
    span = "; ".join(f"{w} steps {a}-{b}" for w, (a, b, _) in wins.items())
    t = Table(title=f"forensics: per step, median over ranks ({span})", width=WIDTH)
    for col, just in (("quantity", "left"), ("phase", "left"), ("before", "right"), ("after", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    t.add_column("x", justify="right")
    t.add_column("grew on ranks", overflow="fold", ratio=1)
    grew = {(g.get("op") or g.get("name"), g.get("phase")): g for g in fx.get("grew") or ()}
    for row in fx.get("table") or ():
        name, unit = row.get("op") or row.get("name"), row.get("unit", "s")
        b, a = row.get("before"), row.get("after")
        ratio = f"{a / b:.1f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0 else "-"
        g = grew.get((name, row.get("phase")))
        on = rank_ranges(g["ranks"]) + f" ({_fmt_q(g['before'], unit)} -> {_fmt_q(g['after'], unit)})" if g else ""
        t.add_row(
            name, row.get("phase") or "-", _fmt_q(b, unit), _fmt_q(a, unit), ratio, on, style="red" if g else None
        )
    return t


def _render_forensics(fx: dict[str, Any], console: Console, width: int) -> None:
    kind = fx.get("kind")
    console.print(_wrap(str(fx.get("message", "")), width, "", "  "), markup=False, soft_wrap=True)
    if fx.get("table"):
        console.print(_forensic_table(fx))
    if fx.get("experiment") and kind is not None:
        console.print(_wrap(f"to settle it: {fx['experiment']}", width, "", "  "), markup=False, soft_wrap=True)


def _rank_rows(v: Verdict) -> list[int]:
    ranks = sorted(v.ranks)
    if len(ranks) <= MAX_RANK_ROWS:
        return ranks
    flagged = {r for e in v.events for r in e.ranks if e.kind in ("straggler", "hang")}
    by_local = sorted(ranks, key=lambda r: v.ranks[r].forward if math.isfinite(v.ranks[r].forward) else 0)
    keep = flagged | set(by_local[:4]) | set(by_local[-4:])
    return sorted(keep)[:MAX_RANK_ROWS]


def _unit(v: Verdict, shown: list[int]) -> tuple[str, float]:
    vals = [getattr(v.ranks[r], f) for r in shown for f in ("step_s", "data", "forward", "backward", "optimizer")]
    top = max((x for x in vals if math.isfinite(x)), default=0.0)
    return ("s", 1.0) if top >= 10 else ("ms", 1000.0)


def _ranks_table(v: Verdict) -> Table:
    shown = _rank_rows(v)
    unit, scale = _unit(v, shown)
    s = v.series
    span = ""
    if s is not None and s.steps.size:
        first = s.steps[v.warmup_skip] if s.steps.size > v.warmup_skip else s.steps[0]
        span = f" over steps {first}-{s.steps[-1]}"
    more = "" if len(shown) == len(v.ranks) else f"; {len(shown)} of {len(v.ranks)} ranks"
    t = Table(title=f"per rank: medians{span}, in {unit}{more}")
    for col in ("rank", "steps", "step", "data", "forward", "backward", "optimizer", "tokens"):
        t.add_column(col, justify="right")
    flagged = {r for e in v.events for r in e.ranks if e.kind in ("straggler", "hang")}

    def cell(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{x * scale:,.2f}" if unit == "s" else f"{x * scale:,.1f}"

    for r in shown:
        m = v.ranks[r]
        tok = "-" if not math.isfinite(m.tokens) else f"{m.tokens:.0f}"
        t.add_row(
            str(r),
            str(m.steps),
            cell(m.step_s),
            cell(m.data),
            cell(m.forward),
            cell(m.backward),
            cell(m.optimizer),
            tok,
            style="red" if r in flagged else None,
        )
    return t


def _wrap(text: str, width: int, first: str, rest: str) -> str:
    return textwrap.fill(text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False)


def render_verdict(v: Verdict, console: Console | None = None) -> None:
    if console is None:
        c = Console(highlight=False)
        console = (
            Console(width=min(c.width, WIDTH), highlight=False)
            if c.is_terminal
            else Console(width=WIDTH, highlight=False)
        )
    console.print(f"[{STYLE[v.verdict]}]verdict: {v.verdict}[/]")
    width = min(console.width, WIDTH)
    console.print(_wrap(v.message, width, "", "  "), markup=False, soft_wrap=True)
    if v.events:
        for line in evidence_lines(v.events[0]):
            console.print(_wrap(line, width, "  - ", "    "), markup=False, soft_wrap=True)
    if len(v.events) > 1:
        console.print(_events_table(v))
    collapse = next((e for e in v.events if e.kind == "collapse" and e.evidence.get("per_rank")), None)
    if collapse is not None:
        console.print(_collapse_table(collapse))
    if v.forensics is not None:
        _render_forensics(v.forensics, console, width)
    if v.ranks:
        console.print(_ranks_table(v))
    if v.sources:
        more = f" (+{len(v.sources) - 4} more)" if len(v.sources) > 4 else ""
        console.print(f"read: {', '.join(v.sources[:4])}{more}", style="dim", markup=False)
    for line in v.skipped:
        console.print(_wrap(f"left out: {line}", width, "", "  "), style="dim", markup=False, soft_wrap=True)


def _flag_words(flags: dict[str, dict[str, Any]]) -> str:
    words = []
    if b := flags.get("bimodal"):
        words.append(
            f"bimodal: {fmt_s(b['fast_s'])} x {b['fast_share']:.0%} and {fmt_s(b['slow_s'])} x "
            f"{b['slow_share']:.0%} of steps (Ashman D {b['ashman_d']})"
        )
    if g := flags.get("backward_grew"):
        if g.get("by") == "collapse detector":
            words.append(
                f"backward grew {fmt_s(g['before_s'])} -> {fmt_s(g['after_s'])} from step {g['from_step']} (collapse)"
            )
        else:
            words.append(
                f"backward grew {fmt_s(g['first_third_s'])} -> {fmt_s(g['last_third_s'])} (first vs last third)"
            )
    return "; ".join(words) or "steady"


def show_runs(checks: list, *, json_out: bool = False) -> None:
    """What `analyze --runs` prints: each run, its flags, and the runs to rerun."""
    rerun = [c.path for c in checks if c.rerun]
    if json_out:
        print(json.dumps({"runs": [c.to_dict() for c in checks], "rerun": rerun}, indent=2, default=str))
        return
    console = Console(width=WIDTH, highlight=False)
    t = Table(title="runs of one study: check each before comparing their points", width=WIDTH)
    for col, just in (("run", "left"), ("steps", "right"), ("step", "right"), ("verdict", "left")):
        t.add_column(col, justify=just, overflow="fold")
    t.add_column("flags", overflow="fold", ratio=1)
    for c in checks:
        t.add_row(
            c.path, str(c.steps), fmt_s(c.step_s), c.verdict, _flag_words(c.flags), style="red" if c.rerun else None
        )
    console.print(t)
    if rerun:
        msg = f"rerun before comparing: {', '.join(rerun)} (their step times are not one steady value)"
    else:
        msg = "every run is steady: its points can be compared"
    console.print(_wrap(msg, WIDTH, "", "  "), markup=False, soft_wrap=True)


def show_verdict(v: Verdict, *, json_out: bool = False, plot: str | None = None) -> None:
    """What `analyze` prints (and the PNG timeline, when asked)."""
    if plot:
        from prism_strategy.report.timeline import plot_timeline

        plot_timeline(v, plot)
    if json_out:
        print(verdict_json(v))
    else:
        render_verdict(v)
