"""`plan --script`: what was read from the script, one line per input, for people."""

from __future__ import annotations

from typing import Any

LABELS = {"loss": "loss", "ckpt_freq": "checkpointing", "optimizer": "optimizer", "precision": "precision",
          "reduce_dtype": "reduce dtype", "compile": "compile", "strategy": "strategy"}
WIDTH = 100


def script_lines(section: dict[str, Any]) -> list[str]:
    """Each input: what was planned, from which line and code (or that it was assumed, or that a
    flag won); then what could not be told. Lines fit WIDTH columns."""
    lines = [_fit(f"script {section['file']}:")]
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
        lines.append(_fit(head))
        if e["by"] == "script" and e.get("note"):
            lines.append(_fit(f"    {e['note']}"))
    lines += [_fit(f"  {t}") for t in section["could_not_tell"]]
    return lines


def _value(v: Any) -> str:
    return {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def _fit(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."
