"""StepMonitor folders (this project's `prism_strategy.runtime.monitor`): ``rank{R}.jsonl``.

Lines with ``kind``: ``meta`` (rank, world_size, host, device, torch), ``step`` (step, step_s,
phases, samples, tokens, peak_mem_bytes), and summary / event / close (not needed here). A file
that restarts (a second meta line) keeps only its last run, as `diagnose.logs` does. Each step is
one window; its time is the slowest rank's ``step_s`` (the job moves at that pace), each phase the
slowest rank's. Only steps every rank logged are used. ``peak_mem_bytes`` is the allocator's
``max_memory_allocated`` on an accelerator (peak allocated) and the process max RSS on CPU.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prism_strategy.readers.training_log import PHASES, ParsedLog, Window, json_lines, number
from prism_strategy.specs.errors import SpecError

RANK_FILE = re.compile(r"rank(\d+)\.jsonl$")


def rank_files(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if RANK_FILE.fullmatch(p.name)), key=lambda p: int(p.name[4:-6]))


def _read_rank(path: Path, log: ParsedLog) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    meta: dict[str, Any] = {}
    steps: dict[int, dict[str, Any]] = {}
    for i, obj in json_lines(path):
        where = f"{path}:{i}"
        if obj.get("kind") == "meta":
            if steps:
                log.notes.append(f"{where}: the run restarted; {len(steps)} earlier steps of this rank left out")
            meta, steps = obj | {"_where": where}, {}
        elif obj.get("kind") == "step":
            phases = obj.get("phases") or {}
            if not isinstance(phases, dict):
                raise SpecError(f"{where}: 'phases' must be an object of seconds")
            steps[int(number(obj, "step", where))] = {
                "step_s": number(obj, "step_s", where), "where": where,
                "phases": {p: number(phases, p, where) for p in PHASES if p in phases},
                "samples": number(obj, "samples", where, required=False),
                "tokens": number(obj, "tokens", where, required=False),
                "peak": number(obj, "peak_mem_bytes", where, required=False)}
    if not meta:
        raise SpecError(f"{path}: no meta line; not a StepMonitor rank file")
    return meta, steps


def read(folder: Path) -> ParsedLog:
    files = rank_files(folder)
    log = ParsedLog(format="stepmonitor", files=files)
    ranks = [_read_rank(f, log) for f in files]
    meta0 = ranks[0][0]
    world = int(meta0.get("world_size", len(files)))
    log.state("world_size", world, meta0["_where"])
    if len(files) != world:
        log.notes.append(f"{len(files)} rank files for world size {world}; timing from the ranks present")
    log.host, log.torch = str(meta0.get("host", "")), str(meta0.get("torch", ""))
    common = sorted(set.intersection(*(set(s) for _, s in ranks)))
    on_cpu = str(meta0.get("device", "cpu")).startswith("cpu")
    for step in common:
        rows = [s[step] for _, s in ranks]
        phases = {p: max(r["phases"].get(p, 0.0) for r in rows) for p in PHASES if any(p in r["phases"] for r in rows)}
        log.windows.append(Window(last_step=step, steps=1, where=rows[0]["where"],
                                  step_s=max(r["step_s"] for r in rows), phases=phases))
        for r in rows:
            log.peak("peak_rss_bytes" if on_cpu else "peak_allocated_bytes", r["peak"])
    if common:
        first = ranks[0][1][common[0]]
        if first["samples"]:
            log.state("samples_per_rank_step", int(first["samples"]), first["where"])
            if first["tokens"]:
                log.state("seq_len", int(first["tokens"] // first["samples"]), first["where"])
    return log
