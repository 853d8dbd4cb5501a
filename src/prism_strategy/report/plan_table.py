"""Render a Plan for people: one row per strategy, the recommendation, its reasons, the sweep."""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from prism_strategy.planning.option import Option, Plan
from prism_strategy.planning.recommend import ckpt_text
from prism_strategy.report.console import Column, fitted_table, footnotes, table_console
from prism_strategy.specs.cluster import GiB
from prism_strategy.specs.parts import image_tokens


def _fmt_items(o) -> str:
    return "; ".join(f"{label} {b / GiB:.1f}" for label, b in o.memory.largest_items(2))


def _compact(v: float) -> str:
    """4 significant-ish characters: 950, 9.5k, 95k, 1.2M."""
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if v >= div:
            x = v / div
            return f"{x:.1f}{suffix}" if x < 10 else f"{x:.0f}{suffix}"
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def _ckpt(k: int | str | None) -> str:
    return "-" if k is None else str(k)


def _range_pct(rng: list[float] | None, value: float | None) -> str:
    """A samples/s range as percent below / above the prediction ("-11/+13%")."""
    if not rng or not value:
        return "-"
    return f"-{100 * (1 - rng[0] / value):.0f}/+{100 * (rng[1] / value - 1):.0f}%"


def _range(o) -> str:
    return _range_pct(o.samples_per_s_range, o.samples_per_s)


def plan_title(p: Plan) -> str:
    sc, t = p.scenario, p.scenario.training
    seq = f"seq {t.seq_len}" + (f" (mean {t.mean_seq_len})" if t.mean_seq_len else "")
    if images := image_tokens(sc.model, t):  # tok/s/dev counts them: the title says so
        seq += f" text + {images} image tokens"
    ckpt = "checkpointing: fastest that fits per option" if t.ckpt_auto else ckpt_text(t.ckpt_name)
    batch = f", global batch {t.global_batch}" if t.global_batch else ""
    run = f", {t.optimizer} ({t.optimizer_impl_on(sc.platform.device)})" + (
        f", loss {t.loss}" if t.loss != "upcast" else ""
    )
    mode = sc.model.mode if sc.model.lora is None else f"LoRA r={sc.model.lora.rank}, base frozen"
    return (
        f"{sc.model.name} ({mode}) on {sc.layout.nodes} x {sc.platform.name} ({sc.layout.world} ranks), "
        f"{seq}, {t.precision}{batch}, {ckpt}{run}{_env(sc)}"
    )


def _env(sc) -> str:
    """Where the backend's comm model reads the environment (oneCCL: it decides the algorithm, and so
    the prediction), the title names the env profile it was priced under."""
    from prism_strategy.planning.env_advice import MODEL_VARS

    env = sc.environment
    if not MODEL_VARS.get(sc.platform.collective_library) or env is None:
        return ""
    return f", env {env.profile or sc.platform.env_profile or 'none'}"


CAPTION = (
    "predicted by the analytic model{calibrated} (provenance in --json); GiB per device at the step's worst moment, "
    "as judged against usable memory (allocated + runtime + the cache a flush cannot free; memory_judged_on); mb x accum x ranks = "
    "global samples per step; ckpt k = checkpoint every k-th block, 0 = none, sac = selective; range = 80% range "
    "of samples/s ({range_how}; provenance.range); "
    "tok/s/dev = tokens/s per device; MFU = model FLOPs (no recompute) / the {peak} peak; comm = exposed share "
    "of the step; eff = samples/s per node vs the same option (mb, accum, ckpt) on 1 node"
)


def _judged_gib(o: Option) -> float:
    """The figure feasibility is judged on (memory_at_limit_gib), else the allocated estimate."""
    return o.memory_runtime.get("memory_at_limit_gib", o.memory.total / GiB)


def option_notes(p: Plan) -> tuple[list[str], list[str]]:
    """(per option: its footnote reference, the numbered footnotes): an infeasible option's reason,
    else its first note; identical texts share a number."""
    notes: list[str] = []
    refs = []
    for o in p.options:
        text = o.why_not if not o.feasible else (o.notes[0] if o.notes else "")
        if text and text not in notes:
            notes.append(text)
        refs.append(f"[{notes.index(text) + 1}]" if text else "")
    return refs, notes


OPTION_COLUMNS = [
    Column(header="strategy"),
    Column(header="fits"),
    Column(header="GiB", justify="right"),
    Column(header="largest items (GiB)", drop=9, max_width=36),
    Column(header="max mb", justify="right", drop=8),
    Column(header="ckpt", justify="right"),
    Column(header="mb", justify="right"),
    Column(header="accum", justify="right"),
    Column(header="global", justify="right"),
    Column(header="step s", justify="right", drop=5),
    Column(header="samples/s", justify="right"),
    Column(header="range", justify="right"),
    Column(header="tok/s/dev", justify="right", drop=2),
    Column(header="MFU", justify="right", drop=3),
    Column(header="comm", justify="right", drop=1),
    Column(header="bound", drop=7),
    Column(header="eff", justify="right", drop=6),
    Column(header="note"),
]
"""drop: the order a narrow terminal gives columns up, the highest first (the itemisation, then what
another column implies: max mb, bound, eff, step s = global / samples/s); the prediction and its
range are never dropped, and the table says which columns it left out (report/console.py)."""


def _timed(o: Option, text: str) -> str:
    """A figure of the step, or "-" for an option judged before timing (planning/advice.py)."""
    return text if o.step_time_s > 0 else "-"


def options_table(p: Plan, width: int = 120) -> RenderableType:
    cols, rows = option_columns_rows(p)
    return fitted_table(plan_title(p), cols, rows, width, caption=caption(p))


def option_columns_rows(p: Plan) -> tuple[list[Column], list[list[str]]]:
    """The options table's columns and cells, the same for the terminal and for Markdown."""
    refs, _ = option_notes(p)
    cols = list(OPTION_COLUMNS)
    traced = any(o.traced for o in p.options)
    if traced:
        cols.insert(3, Column(header="traced GiB / max mb", justify="right"))
    rows = []
    for o, ref in zip(p.options, refs):
        mark = "*" if o.strategy == p.recommended else ""
        row = [
            mark + o.strategy,
            "yes" if o.feasible else "no",
            f"{_judged_gib(o):.1f}",
            _fmt_items(o),
            str(o.max_micro_batch),
            str(o.ckpt_freq),
            str(o.micro_batch),
            _timed(o, str(o.grad_accum)),
            _timed(o, str(o.global_batch)),
            _timed(o, f"{o.step_time_s:.3f}"),
            _timed(o, f"{o.samples_per_s:.1f}"),
            _range(o),
            _timed(o, _compact(o.tokens_per_s_per_device)),
            _timed(o, f"{o.mfu:.0%}"),
            _timed(o, f"{o.comm_fraction:.0%}"),
            _timed(o, o.bound),
            "-" if o.scaling_efficiency is None else f"{o.scaling_efficiency:.2f}",
            ref,
        ]
        if traced:
            row.insert(
                3,
                "-"
                if not o.traced
                else f"{o.traced['traced_memory_gib']['total']:.1f} / {o.traced['traced_max_micro_batch']}",
            )
        rows.append(row)
    return cols, rows


def caption(p: Plan) -> str:
    """CAPTION, naming the calibration file when the platform's values come from one."""
    cal = p.options[0].provenance.get("calibration", "none") if p.options else "none"
    where = cal.rsplit(", ", 1)[-1] if cal != "none" else ""
    pf, t = p.scenario.platform, p.scenario.training
    peak = (
        f"{pf.hardware.peak_tflops_bf16:g} TF/s bf16"
        if t.compute_dtype == "bf16"
        else f"{pf.hardware.peak_tflops_fp32:g} TF/s fp32"
    )
    return CAPTION.format(calibrated=f", calibrated ({where})" if where else "", peak=peak, range_how=range_how(p))


def range_how(p: Plan) -> str:
    """How the plan's ranges were made (estimate/range_parts.py step_range): composed from the
    step's parts where a collective fit covers the platform (Aurora), else the step as one part
    with the fit's leave-one-out half-width (estimate/ranges.py); docs/fits.md."""
    composed = any(o.range is not None and o.range.slow_base is not None for o in p.options)
    if composed:
        return (
            "composed from the step's parts, each with the held-out errors of the fit that decided it; "
            "late ranks widen the low side"
        )
    return (
        "the fit's leave-one-out errors, wider for another GPU or an uncalibrated preset; scale beyond the "
        "measured nodes and late ranks widen the low side"
    )


SWEEP_COLUMNS = [
    Column(header="nodes", justify="right"),
    Column(header="strategy"),
    Column(header="fits"),
    Column(header="ckpt", justify="right"),
    Column(header="mb", justify="right"),
    Column(header="accum", justify="right"),
    Column(header="global", justify="right"),
    Column(header="step s", justify="right", drop=2),
    Column(header="samples/s", justify="right"),
    Column(header="range", justify="right"),
    Column(header="eff", justify="right", drop=1),
    Column(header="bound", drop=3),
    Column(header="why not", footnote=True),
]


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def sweep_table(p: Plan, width: int = 120) -> RenderableType:
    cols, rows = sweep_columns_rows(p.sweep, p.recommended)
    return fitted_table(
        "scaling (predicted): the leading strategies and the pick (*) over node counts",
        cols,
        rows,
        width,
        caption=SWEEP_CAPTION,
    )


def sweep_columns_rows(sweep: list[dict], recommended: str | None) -> tuple[list[Column], list[list[str]]]:
    """The scaling table's columns and cells, the same for the terminal and for Markdown."""
    rows = [
        [
            str(r["nodes"]),
            ("*" if r["strategy"] == recommended else "") + r["strategy"],
            "yes" if r["feasible"] else "no",
            _ckpt(r["ckpt_freq"]),
            _num(r["micro_batch"], "d"),
            _num(r["grad_accum"], "d"),
            _num(r["global_batch"], "d"),
            _num(r["step_time_s"], ".3f"),
            _num(r["samples_per_s"], ".1f"),
            _range_pct(r.get("samples_per_s_range"), r["samples_per_s"]),
            _num(r["scaling_efficiency"], ".2f"),
            r["bound"] or "-",
            r.get("why_not") or "",
        ]
        for r in sweep
    ]
    cols = SWEEP_COLUMNS if any(r[-1] for r in rows) else SWEEP_COLUMNS[:-1]
    return cols, [r[: len(cols)] for r in rows]


SWEEP_CAPTION = (
    "eff = samples/s per node over the same strategy's first feasible row above (fewest nodes), "
    "each row at its own micro-batch, accumulation and checkpointing"
)


def _bullets(lines: list[str], mark: str = "-") -> Table:
    g = Table.grid(padding=(0, 1))
    g.add_column(no_wrap=True)
    g.add_column(overflow="fold")
    for line in lines:
        g.add_row(Text(f"  {mark}"), Text(line))
    return g


def print_plan(p: Plan, console: Console | None = None) -> None:
    c = console or table_console()
    c.print(options_table(p, c.width))
    _, notes = option_notes(p)
    if notes:
        c.print(footnotes(notes))
    for line in measured_comm_lines(p):
        c.print(line, markup=False, highlight=False)
    c.print()
    c.print(Text.assemble(("recommended: ", "bold"), p.recommended or "none"))
    c.print(_bullets(p.reasons))
    for w in p.warnings:
        c.print(Text.assemble(("warning: ", "yellow"), w))
    if p.sweep:
        c.print()
        c.print(sweep_table(p, c.width))
    if p.script is not None:
        from prism_strategy.report.plan_script import option_verdicts, script_lines

        c.print()
        c.print(Text("\n".join(script_lines(p.script, option_verdicts(p.options)))))
    if p.config is not None:
        from prism_strategy.inputs.frameworks.plan import config_lines

        c.print()
        c.print(Text("\n".join(config_lines(p.config))))


def measured_comm_lines(p: Plan) -> list[str]:
    """Which options' collectives were priced from measured curves (estimate/comm_measured.py)."""
    by_text: dict[str, list[str]] = {}
    for o in p.options:
        head = o.provenance.get("communication", "").split("; other collectives ")[0]
        if " measured: " in head:
            by_text.setdefault(head, []).append(o.strategy)
    return [f"communication of {', '.join(names)}: {text}" for text, names in by_text.items()]


def estimate_lines(d: dict) -> list[str]:
    """`prism-strategy estimate`: analytic and traced memory of one option, key by key."""
    traced, analytic = d["traced_memory_gib"], d.get("memory_gib") or {}
    lines = [f"{d['strategy']} at micro-batch {d['micro_batch']} ({d['traced_method']}, {d['traced_seconds']} s):"]
    for k, t in traced.items():
        a = analytic.get(k)
        lines.append(f"  {k:12s} analytic {'-' if a is None else f'{a:9.3f}'} GiB   traced {t:9.3f} GiB")
    lines.append(f"  peak at:     analytic {d.get('memory_peak_at', '-')}, traced {d['traced_phase']}")
    lines.append(f"  max micro-batch: analytic {d.get('max_micro_batch', '-')}, traced {d['traced_max_micro_batch']}")
    lines += [f"  note: {n}" for n in d.get("traced_notes", [])]
    if "torch.compile" in d.get("provenance", {}).get("memory", ""):
        lines.append(
            "  note: the trace runs eager (fake tensors are not compiled); the analytic side has "
            "torch.compile's term (estimate/memory_compile.py)"
        )
    import textwrap

    return [w for line in lines for w in textwrap.wrap(line, 100, subsequent_indent="        ")]


def show_plan(p: Plan, *, markdown: str | None = None, json_out: bool = False, measured: list | None = None) -> None:
    """What `plan` prints: the JSON or the tables; a Markdown report beside it when asked.
    measured: `plan --db`'s runs at the plan's layout (bench/results/measured.py), shown beside the
    prediction; None when no store was given."""
    if markdown is not None:
        from prism_strategy.report.markdown import write_markdown

        write_markdown(p, markdown)
    if json_out:
        from prism_strategy.report.console import print_json
        from prism_strategy.report.plan_json import plan_dict

        extra = {} if measured is None else {"measured_at_layout": [m.as_dict() for m in measured]}
        print_json(plan_dict(p) | extra)
    else:
        print_plan(p)
        if measured is not None:
            print("\n".join(measured_lines(p, measured)))


def measured_lines(p: Plan, measured: list) -> list[str]:
    """One line per option the store measured at this layout; the others are said to stay predicted."""
    import textwrap

    lay = p.scenario.layout
    head = f"measured at this layout ({lay.nodes} x {lay.ranks_per_node} ranks, the results store):"
    lines = []
    for m in measured:
        where = f"(row {m.result_id}, {m.measured_on})"
        if m.samples_per_s is None:
            lines.append(f"{m.strategy}: {m.status} {where}; predicted {m.predicted_samples_per_s:.2f} samples/s")
            continue
        lines.append(
            f"{m.strategy}: {m.samples_per_s:.2f} samples/s measured {where}; predicted "
            f"{m.predicted_samples_per_s:.2f} ({m.error:+.0%})"
        )
    rest = [o.strategy for o in p.options if o.feasible and o.strategy not in {m.strategy for m in measured}]
    if rest:
        lines.append(f"not measured at this layout, predicted only: {', '.join(rest)}")
    wrapped = [w for x in lines for w in textwrap.wrap(x, 98, initial_indent="  ", subsequent_indent="    ")]
    return [head, *wrapped]


def show_estimate(result: Option | dict, *, json_out: bool = False) -> bool:
    """What `estimate` prints: the JSON or the lines. False when nothing was traced because the
    model states alone cannot fit (a finding: the caller exits 1)."""
    import textwrap

    from prism_strategy.report.console import print_json
    from prism_strategy.report.plan_json import estimate_dict

    d = estimate_dict(result)
    traced = "traced_memory_gib" in d
    if json_out:
        print_json(d)
    elif traced:
        print("\n".join(estimate_lines(d)))
    else:
        print("\n".join(textwrap.wrap(f"{d['strategy']}: {d['why_not']}; nothing traced", 100, subsequent_indent="  ")))
    return traced
