"""The markdown page of benchmarks/device_validation.py: how the run was made, one table row per
point (predicted beside measured), a summary. Pure text; no torch.distributed."""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path
from typing import Any

from prism_strategy.bench.results.store import Result
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.strategies import get_strategy

COLUMNS = (
    "model",
    "strategy",
    "mb",
    "ckpt",
    "probe",
    "predicted",
    "status",
    "alloc pred GiB",
    "alloc meas GiB",
    "alloc err %",
    "reserved meas GiB",
    "step pred s",
    "step meas s",
    "step err %",
    "error",
)


def gib(b: Any) -> str:
    return "n/a" if b is None else f"{b / GiB:.3g}"


def _err(pred: float | None, meas: float | None) -> str:
    return "" if pred is None or not meas else f"{(pred - meas) / meas * 100:+.0f}"


def table_line(r: Result | None, row: Any, predicted: dict[str, Any]) -> str:
    p, m = predicted, (r.measured if r else {})
    status = r.status if r else "not run (budget)"
    meas_alloc = m.get("peak_memory_bytes")
    reached = m.get("peak_allocated_before_error_bytes")
    meas_step = m.get("step_time_s") if r and r.status == "ok" else None
    note = (m.get("error") or "").replace("|", "/").replace("\n", " ")[:90] if r and r.status != "ok" else ""
    cells = [
        row.model,
        row.strategy,
        row.micro_batch,
        row.ckpt_freq,
        row.probe or row.variant or "-",
        "fits" if p["fits"] else "does not fit",
        status,
        gib(p["allocated_bytes"]),
        f"> {gib(reached)}" if reached and not meas_alloc else gib(meas_alloc),
        _err(p["allocated_bytes"], meas_alloc),
        gib(m.get("peak_reserved_bytes")) if r else "",
        f"{p['step_time_s']:.3f}",
        f"{meas_step:.3f}" if meas_step else "",
        _err(p["step_time_s"], meas_step),
        note,
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def summary_lines(results: list[Result]) -> list[str]:
    ok = [r for r in results if r.status == "ok"]
    lines = []
    if ok:
        t = statistics.median(abs(r.predicted["step_time_s"] / r.measured["step_time_s"] - 1) * 100 for r in ok)
        mem = [
            abs(r.predicted["allocated_bytes"] / r.measured["peak_memory_bytes"] - 1) * 100
            for r in ok
            if r.measured.get("peak_memory_bytes")
        ]
        lines.append(
            f"- median |error| over {len(ok)} measured rows: step time {t:.0f}%"
            + (f", peak allocated {statistics.median(mem):.0f}%" if mem else "")
        )
    judged = [r for r in results if r.status in ("ok", "oom")]
    agree = sum((r.status == "ok") == bool(r.predicted["fits"]) for r in judged)
    lines.append(f"- fits / does not fit: the prediction agrees with the device on {agree} of {len(judged)} rows")
    return lines


def render(
    a: argparse.Namespace,
    platform: PlatformSpec,
    rows: list[Any],
    results: dict[Any, Result],
    predictions: dict[Any, dict[str, Any]],
    env: dict[str, str],
) -> str:
    head = [
        f"# Device validation: {platform.name}, {env['date']}",
        "",
        f"- command: `{env['command']}`",
        f"- device: {env['device']} ({env['device_name']}), backend {env['backend']}, torch {env['torch']}, "
        f"host {env['host']}, code {env['code']}",
        f"- run: world 1 (a 1-rank process group; FSDP2 on a one-rank mesh), precision {a.precision}, "
        f"seq {a.seq_len}, AdamW, {a.warmup} burn-in steps, median of {a.steps} timed steps "
        "(OOM probes: 1 and 1), synchronised at phase ends",
        f"- measured memory: {env['memory_figure']}; on an OOM row '> X': the peak allocated before it failed",
        f"- predicted: `planner.evaluate` for platform preset {platform.name} (uncalibrated) at 1 node x 1 rank, "
        "same micro-batch, ckpt and precision. The memory model predicts allocated memory (live tensors at "
        "the peak moment); its framework reserve (context, communicator buffers, "
        f"{platform.allocator.framework_reserve_gib:g} GiB) is outside the allocator and left out of 'alloc pred'; "
        "allocator caching (reserved - allocated) is not modelled, so reserved is shown measured only",
        *(
            ["- DeepSpeed ZeRO skipped: not in --strategies (zero1-3 run at world 1 where DeepSpeed is installed)"]
            if not any(get_strategy(s).engine == "deepspeed" for s in a.strategy_list)
            else []
        ),
        f"- stored: {env['db']} ({env['stored_as']}), {len(results)} of {len(rows)} rows run",
        "",
    ]
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    table += [table_line(results.get(r), r, predictions[r]) for r in rows]
    return "\n".join(head + table + [""] + summary_lines(list(results.values())) + [""])


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
