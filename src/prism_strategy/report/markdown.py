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
from prism_strategy.report.plan_table import SWEEP_CAPTION, caption, option_notes, plan_title
from prism_strategy.specs.cluster import GiB
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import model_parts

DEFAULT_SWEEP = (1, 2, 4, 8, 16)
"""Node counts of the scaling plot when the plan was made without --sweep-nodes."""


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    right = {"GiB/dev", "ckpt", "mb", "accum", "global", "step s", "samples/s", "comm", "eff", "nodes", "max mb"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if h in right else "---" for h in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return lines


def _options(p: Plan) -> list[str]:
    refs, notes = option_notes(p)
    rows = [
        [
            ("**" + o.strategy + "**") if o.strategy == p.recommended else o.strategy,
            "yes" if o.feasible else "no",
            f"{o.memory.total / GiB:.1f}",
            o.max_micro_batch,
            o.ckpt_freq,
            o.micro_batch,
            o.grad_accum,
            o.global_batch,
            f"{o.step_time_s:.3f}",
            f"{o.samples_per_s:.1f}",
            f"{o.comm_fraction:.0%}",
            o.bound,
            "-" if o.scaling_efficiency is None else f"{o.scaling_efficiency:.2f}",
            ref,
        ]
        for o, ref in zip(p.options, refs)
    ]
    head = [
        "strategy",
        "fits",
        "GiB/dev",
        "max mb",
        "ckpt",
        "mb",
        "accum",
        "global",
        "step s",
        "samples/s",
        "comm",
        "bound",
        "eff",
        "note",
    ]
    return [*_table(head, rows), "", f"_{caption(p)}._", "", *(f"{n}. {_cell(t)}" for n, t in enumerate(notes, 1))]


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


def _sweep(sweep: list[dict[str, Any]], png: str) -> list[str]:
    rows = [
        [
            r["nodes"],
            r["strategy"],
            "yes" if r["feasible"] else "no",
            *("-" if r[k] is None else r[k] for k in ("ckpt_freq", "micro_batch", "grad_accum", "global_batch")),
            "-" if r["samples_per_s"] is None else f"{r['samples_per_s']:.1f}",
            "-" if r["scaling_efficiency"] is None else f"{r['scaling_efficiency']:.2f}",
            r.get("why_not") or "",
        ]
        for r in sweep
    ]
    head = ["nodes", "strategy", "fits", "ckpt", "mb", "accum", "global", "samples/s", "eff", "why not"]
    return [*_table(head, rows), "", SWEEP_CAPTION + ".", "", f"![scaling (predicted)]({png})"]


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
    lines += ["", "### Scaling (predicted)", "", *_sweep(sweep, png_name), ""]
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
