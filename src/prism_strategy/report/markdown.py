"""`plan --markdown FILE`: the plan as Markdown for an issue or a PR (options table, reasons,
assumptions, scaling table) and its scaling plot as a PNG beside it. Both files appear whole or
not at all."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from prism_strategy.planning.option import Plan
from prism_strategy.planning.planner import sweep_rows
from prism_strategy.planning.recommend import RANKING_RULE
from prism_strategy.report.plan_table import (
    SWEEP_CAPTION,
    caption,
    option_columns_rows,
    option_notes,
    plan_title,
    sweep_columns_rows,
)
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import model_parts

DEFAULT_SWEEP = (1, 2, 4, 8, 16)
"""Node counts of the scaling plot when the plan was made without --sweep-nodes."""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]], right: set[str] | None = None) -> list[str]:
    right = right or {
        "GiB/dev",
        "ckpt",
        "mb",
        "accum",
        "global",
        "step s",
        "samples/s",
        "comm",
        "eff",
        "nodes",
        "max mb",
    }
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if h in right else "---" for h in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return lines


def _options(p: Plan) -> list[str]:
    """The terminal's options table, every column (report/plan_table.option_columns_rows), the pick in bold."""
    _, notes = option_notes(p)
    cols, rows = option_columns_rows(p)
    for r in rows:
        if r[0].startswith("*"):
            r[0] = f"**{r[0][1:]}**"
    right = {c.header for c in cols if c.justify == "right"}
    table = _table([c.header for c in cols], rows, right)
    return [*table, "", f"_{caption(p)}._", "", *(f"{n}. {_cell(t)}" for n, t in enumerate(notes, 1))]


def _assumptions(p: Plan) -> list[str]:
    inputs = p.scenario.inputs()
    params = inputs.pop("params")
    lines = [f"- {k}: `{v}`" for k, v in inputs.items() if v is not None]
    lines.append(
        f"- params: {params['total'] / 1e9:.3f}B total, {params['trainable'] / 1e9:.3f}B trainable ({params['source']})"
    )
    pick = next((o for o in p.options if o.strategy == p.recommended), p.options[0])
    lines += [f"- {k}: {v}" for k, v in pick.provenance.items()]
    lines.append(f"- ranking: {RANKING_RULE}")
    return lines


def _sweep(sweep: list[dict[str, Any]], png: str, recommended: str | None) -> list[str]:
    """The terminal's scaling table, every column (report/plan_table.sweep_columns_rows)."""
    cols, rows = sweep_columns_rows(sweep, recommended)
    right = {c.header for c in cols if c.justify == "right"}
    table = _table([c.header for c in cols], rows, right)
    return [*table, "", SWEEP_CAPTION + ".", "", f"![scaling (predicted, 80% range shaded)]({png})"]


def render_markdown(p: Plan, sweep: list[dict[str, Any]], png_name: str) -> str:
    lines = [f"## prism-strategy plan: {plan_title(p)}", "", f"**Recommended: {p.recommended or 'none'}**", ""]
    lines += [f"- {_cell(r)}" for r in p.reasons]
    lines += [f"- **warning:** {_cell(w)}" for w in p.warnings]
    lines += ["", "### Options", "", *_options(p), "", "### Assumptions", "", *_assumptions(p)]
    if p.script is not None:  # plan --script: what was read from which line
        from prism_strategy.report.plan_script import option_verdicts, script_lines

        lines += [
            "",
            "### Read from the training script",
            "",
            "```",
            *script_lines(p.script, option_verdicts(p.options)),
            "```",
        ]
    lines += ["", "### Scaling (predicted)", "", *_sweep(sweep, png_name, p.recommended), ""]
    return "\n".join(lines)


def write_markdown(p: Plan, path: str | Path) -> tuple[Path, Path]:
    """Write FILE and FILE's stem + "-scaling.png" beside it; returns both paths. Raises SpecError
    (and leaves nothing behind) when they cannot be written."""
    md = Path(path)
    png = md.with_name(md.stem + "-scaling.png")
    if md.is_dir():
        raise SpecError(f"--markdown {md} is a folder; give a file name, e.g. {md / 'plan.md'}")
    if not md.parent.is_dir():
        raise SpecError(f"--markdown {md}: folder {md.parent} does not exist; create it first")
    sweep = p.sweep or sweep_rows(
        p.scenario,
        model_parts(p.scenario.model, p.scenario.training),
        p.options,
        sorted(set(DEFAULT_SWEEP) | {p.scenario.layout.nodes}),
        p.recommended,
    )
    tmp_md, tmp_png = (x.with_name(f".{x.name}.tmp-{os.getpid()}{x.suffix}") for x in (md, png))
    try:
        from prism_strategy.report.plots import scaling_plot

        scaling_plot(sweep, tmp_png, highlight=p.recommended, title=textwrap.fill(plan_title(p), 80))
        tmp_md.write_text(render_markdown(p, sweep, png.name))
        os.replace(tmp_png, png)
        try:
            os.replace(tmp_md, md)
        except OSError:
            png.unlink(missing_ok=True)  # no PNG without its report
            raise
    except OSError as e:
        raise SpecError(f"--markdown {md}: cannot write: {e.strerror or e}") from None
    finally:
        for tmp in (tmp_md, tmp_png):
            tmp.unlink(missing_ok=True)
    return md, png
