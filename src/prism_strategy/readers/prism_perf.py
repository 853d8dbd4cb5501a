"""PRISM's ``perf.jsonl``, and per-step JSONL records of the same shape from other trainers.

As PRISM writes it (`src/training/trainer_native.py`, commit d1fd3d3; see readers/prism.py):
``site: trainer_native_per_50`` records (``step, total_step_s, data_s, fwd_s, bwd_s, opt_s,
mem_alloc_mb, mem_reserved_mb``: 50-step window means, MB = 2**20 bytes) and ``site:
trainer_native_per_log`` records (``step, samples_per_sec`` running mean since the last reset,
``samples_per_step, peak_gb``), both with ``world_size, batch_size, grad_accum, dist_strategy``;
``event`` records and other sites are passed over. These give windows (one record per window
for `analyze`, rank 0: PRISM logs from rank 0).

A line with no ``site`` (and no ``kind``: that is StepMonitor's) is one step of one rank, keys
matched by alias, seconds unless the key ends in ``_ms``::

    {"step": 12, "rank": 0, "step_time": 1.43, "data_time": 0.01, "fwd_time": 0.31,
     "bwd_time": 1.02, "opt_time": 0.09, "tokens": 4096, "seq_len": 512}

A missing rank comes from the path (``rank3`` / ``rank_3`` in a file or folder name), else 0; a
missing step is the line's index among such lines. These give one window per step every rank
logged (`training_log.step_windows`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from prism_strategy.readers.prism import unrun_means, window_start
from prism_strategy.readers.steps import PHASES, StepTimes
from prism_strategy.readers.training_log import (
    ParsedLog,
    Window,
    first_json,
    index,
    json_lines,
    number,
    rank_from_path,
    seconds,
    step_windows,
    window_records,
)

FORMAT = "prism-perf.jsonl"
SUFFIXES = (".jsonl",)
GB, MiB = 1e9, 2.0**20
SITES = ("trainer_native_per_50", "trainer_native_per_log")
ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("step", "iter", "iteration", "global_step"),
    "rank": ("rank", "global_rank"),
    "step_s": ("step_time", "step_s", "total_step_s", "iter_time", "total_time", "time", "dt"),
    "data": ("data_time", "data", "data_s", "t_data", "dataload_time"),
    "forward": ("fwd_time", "fwd", "forward", "forward_time", "t_fwd", "fwd_s"),
    "backward": ("bwd_time", "bwd", "backward", "backward_time", "t_bwd", "bwd_s"),
    "optimizer": ("opt_time", "opt", "optim", "optimizer", "optimizer_time", "optim_time", "t_opt", "opt_s"),
    "tokens": ("tokens", "num_tokens", "ntokens", "n_tokens"),
    "seq_len": ("seq_len", "seq", "seqlen", "sequence_length"),
}
_KEYS = "|".join(re.escape(k) for name in ("step", "step_s", *PHASES) for k in ALIASES[name])


def looks_like(path: Path) -> bool:
    line = first_json(path)
    return (
        path.suffix == ".jsonl" and '"kind"' not in line and bool(re.search(rf'"(?:site|{_KEYS})(?:_ms)?"\s*:', line))
    )


def _num(obj: dict[str, Any], name: str) -> float:
    for key in ALIASES[name]:
        for k, scale in ((key, 1.0), (key + "_ms", 1e-3)):
            v = obj.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v) * scale if abs(v) < 1e300 else math.inf  # an int past float's range: inf
    return math.nan


def _step_record(obj: dict[str, Any], where: str, path: Path, i: int, log: ParsedLog) -> bool:
    rank = _num(obj, "rank")
    rank = index(rank, where, "rank") if math.isfinite(rank) else (rank_from_path(path) or 0)
    step = _num(obj, "step")
    step = index(step, where, "step") if math.isfinite(step) else i
    phases = [seconds(_num(obj, p)) for p in PHASES]
    step_s = seconds(_num(obj, "step_s"))
    if all(math.isnan(v) for v in (step_s, *phases)):
        return False  # no time on it ({"step": 3, "loss": 2.1}): not a step record
    if math.isnan(step_s):
        step_s = sum(p for p in phases if math.isfinite(p))
    tokens = _num(obj, "tokens")
    if math.isnan(tokens):
        tokens = _num(obj, "seq_len")
    log.record(StepTimes(step, rank, step_s, *phases, tokens), where)
    return True


def _scenario(obj: dict[str, Any], where: str, log: ParsedLog) -> None:
    for key, name in (("world_size", "world_size"), ("batch_size", "micro_batch"), ("grad_accum", "grad_accum")):
        if obj.get(key) is not None:
            log.state(name, int(number(obj, key, where)), where)
    ds = obj.get("dist_strategy")
    if ds == "ddp":
        log.state("strategy", "ddp", where)
    elif ds is not None:
        log.state("dist_strategy", str(ds), where)


def _site_record(
    obj: dict[str, Any], where: str, log: ParsedLog, per_50: list[Window], running: list[tuple[int, str, float, float]]
) -> None:
    _scenario(obj, where, log)
    step = int(number(obj, "step", where))
    if obj["site"] == "trainer_native_per_50":
        ph = {
            p: number(obj, k, where)
            for p, k in (("data", "data_s"), ("forward", "fwd_s"), ("backward", "bwd_s"), ("optimizer", "opt_s"))
        }
        per_50.append(
            Window(
                last_step=step,
                steps=step - window_start(step),
                where=where,
                step_s=number(obj, "total_step_s", where),
                phases=ph,
            )
        )
        log.peak("peak_reserved_bytes", (number(obj, "mem_reserved_mb", where, required=False) or 0) * MiB or None)
    else:
        running.append((step, where, number(obj, "samples_per_sec", where), number(obj, "samples_per_step", where)))
        log.peak("peak_allocated_bytes", (number(obj, "peak_gb", where, required=False) or 0) * GB or None)


def read(path: Path) -> ParsedLog:
    log = ParsedLog(format=FORMAT, files=[path])
    per_50: list[Window] = []
    running: list[tuple[int, str, float, float]] = []
    n_steps = 0
    for i, obj in json_lines(path, log):
        where = f"{path}:{i}"
        if "event" in obj or "kind" in obj:
            continue
        if "site" in obj:
            if obj["site"] in SITES:
                _site_record(obj, where, log, per_50, running)
            continue
        n_steps += _step_record(obj, where, path, n_steps, log)
    if per_50:
        log.windows = per_50
    elif running:  # total time since the reset = samples_per_step * n / running samples/s
        log.windows = [
            Window(last_step=w.last_step, steps=w.steps, where=w.where, step_s=w.step_s)
            for w in unrun_means([(s, w, [sps_step / sps]) for s, w, sps, sps_step in running if sps > 0])
        ]
        log.notes.append("timing from per-log running samples/s (no trainer_native_per_50 records)")
    if log.windows and not log.records:
        window_records(log, rank_from_path(path) or 0)
    elif log.records and not log.windows:
        log.windows = step_windows(log)
    return log
