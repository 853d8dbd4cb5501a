"""`plan --script`: what was read from the script, one line per input, for people."""

from __future__ import annotations

import textwrap
from typing import Any

from prism_strategy.specs.cluster import GiB

LABELS = {
    "loss": "loss",
    "ckpt_freq": "checkpointing",
    "optimizer": "optimizer",
    "precision": "precision",
    "reduce_dtype": "reduce dtype",
    "compile": "compile",
    "strategy": "strategy",
}
WIDTH = 100


def script_lines(section: dict[str, Any], verdicts: dict[str, str] | None = None) -> list[str]:
    """Each input: what was planned, from which line and code (or that it was assumed, or that a
    flag won); then what could not be told. verdicts: strategy -> the plan's one-line verdict,
    said under the strategy the script runs. Lines fit WIDTH columns."""
    lines = [f"script {section['file']}:"]
    for name, e in section["inputs"].items():
        label = LABELS.get(name, name)
        if e["by"] == "assumed":
            continue
        if e["by"] == "command line":
            head = f"  {label} {_value(e['planned'])}: {e['note']}"
        elif name == "strategy":
            head = f"  strategy: the script runs {e['read']} (line {e['line']}: {e['evidence']})"
        else:
            head = f"  {label} {_value(e['planned'])} (line {e['line']}: {e['evidence']})"
        lines.append(head)
        if e["by"] == "script" and e.get("note"):
            lines.append(f"    {e['note']}")
        if name == "strategy" and verdicts and e["read"] in verdicts:
            lines.append(f"    the plan for it (predicted): {verdicts[e['read']]}")
    lines += [f"  {t}" for t in section["could_not_tell"]]
    return [w for line in lines for w in _wrap(line)]


def _value(v: Any) -> str:
    return {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def _wrap(line: str) -> list[str]:
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return textwrap.wrap(line, width=WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [line]


def option_verdicts(options) -> dict[str, str]:
    """strategy -> "fits: 12.3 GiB per device at micro-batch 8, 0.512 s per step" or why it does not."""
    out = {}
    for o in options:
        if o.feasible:
            out[o.strategy] = (
                f"fits: {o.memory.total / GiB:.1f} GiB per device at micro-batch {o.micro_batch}, "
                f"{o.step_time_s:.3f} s per step, {o.samples_per_s:.1f} samples/s"
            )
        else:
            out[o.strategy] = f"does not fit: {o.why_not}"
    return out
